"""Shape ops: views and copies that move elements without arithmetic.

They take the default layout of their output rank (a layout tag describes storage, and a
reshaped value is stored afresh).
"""

from __future__ import annotations

import sympy
import torch

from cuvil.ir.types import Dim, TensorType, is_static, numel
from cuvil.ops.draw import movement
from cuvil.ops.nn import ceildiv
from cuvil.ops.reduce import norm_dims
from cuvil.ops.registry import SHAPE, AttrSpec, OpDef, check, register


def _same(a: Dim, b: Dim) -> bool:
    return sympy.simplify(sympy.sympify(a) - sympy.sympify(b)) == 0


def _reshape_type(ts: list[TensorType], a) -> TensorType:
    x, shape = ts[0], tuple(a["shape"])
    holes = [i for i, d in enumerate(shape) if is_static(d) and d == -1]
    check(len(holes) <= 1, "reshape: at most one -1")
    if holes:
        known = numel(tuple(d for i, d in enumerate(shape) if i != holes[0]))
        fill = sympy.simplify(sympy.sympify(x.numel) / sympy.sympify(known))
        check(fill.is_integer is not False, f"reshape: {x.numel} elements do not fit {shape}")
        shape = tuple(fill if i == holes[0] else d for i, d in enumerate(shape))
    check(_same(numel(shape), x.numel), f"reshape: {x.numel} elements do not fit {shape}")
    return TensorType(shape, x.dtype, "", x.device)


def _ref_shape(x: torch.Tensor, shape) -> tuple[int, ...]:
    return tuple(int(d) for d in shape)


for _name in ("reshape", "view"):
    register(OpDef(_name, ("x",), (AttrSpec("shape", "shape"),), _reshape_type,
                   lambda xs, a: xs[0].reshape(_ref_shape(xs[0], a["shape"])), SHAPE,
                   lowering="alias",
                   doc="x with a new shape (same elements, row-major order)",
                   shapes=movement.reshape, reshapes=True))


def _permute_type(ts: list[TensorType], a) -> TensorType:
    x = ts[0]
    dims = tuple(d % max(x.rank, 1) for d in a["dims"])
    check(sorted(dims) == list(range(x.rank)), f"permute: {a['dims']} is not a permutation")
    return TensorType(tuple(x.shape[d] for d in dims), x.dtype, "", x.device)


register(OpDef("permute", ("x",), (AttrSpec("dims", "ints"),), _permute_type,
               lambda xs, a: xs[0].permute(a["dims"]).contiguous(), SHAPE, lowering="move",
               doc="x with its dims reordered", shapes=movement.permute))


def _flip_type(ts: list[TensorType], a) -> TensorType:
    x = ts[0]
    check(x.rank >= 1 and len(a["dims"]) >= 1, "flip: needs a dim to flip")
    norm_dims(tuple(a["dims"]), x.rank, "flip")
    return TensorType(x.shape, x.dtype, "", x.device)


register(OpDef("flip", ("x",), (AttrSpec("dims", "ints"),), _flip_type,
               lambda xs, a: torch.flip(xs[0], tuple(a["dims"])), SHAPE, lowering="move",
               doc="x with the order of its elements reversed along dims",
               shapes=movement.flip))


def _transpose_type(ts: list[TensorType], a) -> TensorType:
    x = ts[0]
    if x.rank == 0:  # torch allows dims 0 / -1 on a 0-d value: nothing moves
        norm_dims(a["dim0"], 0, "transpose"), norm_dims(a["dim1"], 0, "transpose")
        return TensorType((), x.dtype, "", x.device)
    d0, d1 = norm_dims(a["dim0"], x.rank, "transpose")[0], norm_dims(a["dim1"], x.rank,
                                                                      "transpose")[0]
    shape = list(x.shape)
    shape[d0], shape[d1] = shape[d1], shape[d0]
    return TensorType(tuple(shape), x.dtype, "", x.device)


register(OpDef("transpose", ("x",), (AttrSpec("dim0", "int", -2), AttrSpec("dim1", "int", -1)),
               _transpose_type,
               lambda xs, a: xs[0].transpose(a["dim0"], a["dim1"]).contiguous(), SHAPE,
               lowering="move",
               doc="x with dims dim0 and dim1 swapped", shapes=movement.transpose))


def _flatten_type(ts: list[TensorType], a) -> TensorType:
    x = ts[0]
    if x.rank == 0:
        return TensorType((1,), x.dtype, "", x.device)
    s, e = norm_dims(a["start_dim"], x.rank, "flatten")[0], norm_dims(a["end_dim"], x.rank,
                                                                       "flatten")[0]
    check(s <= e, "flatten: start_dim after end_dim")
    shape = (*x.shape[:s], numel(x.shape[s:e + 1]), *x.shape[e + 1:])
    return TensorType(shape, x.dtype, "", x.device)


register(OpDef("flatten", ("x",), (AttrSpec("start_dim", "int", 0), AttrSpec("end_dim", "int", -1)),
               _flatten_type, lambda xs, a: xs[0].flatten(a["start_dim"], a["end_dim"]), SHAPE,
               lowering="alias", doc="dims start_dim..end_dim merged into one",
               shapes=movement.flatten, reshapes=True))


def _unsqueeze_type(ts: list[TensorType], a) -> TensorType:
    x, d = ts[0], a["dim"]
    check(-x.rank - 1 <= d <= x.rank, f"unsqueeze: dim {d} out of range")
    d = d % (x.rank + 1)
    return TensorType((*x.shape[:d], 1, *x.shape[d:]), x.dtype, "", x.device)


register(OpDef("unsqueeze", ("x",), (AttrSpec("dim", "int"),), _unsqueeze_type,
               lambda xs, a: xs[0].unsqueeze(a["dim"]), SHAPE,
               lowering="alias", doc="x with a new dim of size 1", shapes=movement.unsqueeze,
               reshapes=True))


def _squeeze_type(ts: list[TensorType], a) -> TensorType:
    x = ts[0]
    if a["dim"] == ():
        dims = tuple(i for i, d in enumerate(x.shape) if d == 1)
    else:
        dims = tuple(i for i in norm_dims(a["dim"], x.rank, "squeeze")
                     if x.rank and x.shape[i] == 1)  # a 0-d x: dim 0 / -1, nothing goes
    shape = tuple(d for i, d in enumerate(x.shape) if i not in dims)
    return TensorType(shape, x.dtype, "", x.device)


register(OpDef("squeeze", ("x",), (AttrSpec("dim", "ints", ()),), _squeeze_type,
               lambda xs, a: xs[0].squeeze(a["dim"]) if a["dim"] else xs[0].squeeze(), SHAPE,
               lowering="alias",
               doc="x without the given size-1 dims (empty: all of them)",
               shapes=movement.squeeze, reshapes=True))


def _expand_type(ts: list[TensorType], a) -> TensorType:
    x, shape = ts[0], tuple(a["shape"])
    check(len(shape) >= x.rank, "expand: fewer dims than the input")
    lead = len(shape) - x.rank
    out = list(shape[:lead])
    for d, s in zip(x.shape, shape[lead:], strict=True):
        keep = is_static(s) and s == -1
        check(keep or d == 1 or d == s, f"expand: dim {d} cannot expand to {s}")
        out.append(d if keep else s)
    return TensorType(tuple(out), x.dtype, "", x.device)


register(OpDef("expand", ("x",), (AttrSpec("shape", "shape"),), _expand_type,
               lambda xs, a: xs[0].expand(_ref_shape(xs[0], a["shape"])).contiguous(), SHAPE,
               lowering="move",
               doc="x broadcast to shape (-1 keeps a dim)", shapes=movement.expand))


def _cat_type(ts: list[TensorType], a) -> TensorType:
    x = ts[0]
    d = norm_dims(a["dim"], x.rank, "cat")[0]
    for t in ts[1:]:
        check(t.rank == x.rank and t.dtype == x.dtype, "cat: inputs differ in rank or dtype")
        check(all(t.shape[i] == x.shape[i] for i in range(x.rank) if i != d),
              "cat: inputs differ outside the cat dim")
    size = sum((t.shape[d] for t in ts[1:]), start=x.shape[d])
    shape = (*x.shape[:d], size, *x.shape[d + 1:])
    return TensorType(tuple(shape), x.dtype, "", x.device)


register(OpDef("cat", ("x",), (AttrSpec("dim", "int", 0),), _cat_type,
               lambda xs, a: torch.cat(xs, a["dim"]), SHAPE, lowering="concat", variadic=True,
               doc="inputs joined along dim", shapes=movement.cat))


def _slice_type(ts: list[TensorType], a) -> TensorType:
    x = ts[0]
    d = norm_dims(a["dim"], x.rank, "slice")[0]
    size, start, end, step = x.shape[d], a["start"], a["end"], a["step"]
    check(step >= 1, "slice: step must be >= 1")
    if is_static(size):
        start, end = slice(start, end).indices(size)[:2]
        length = max(0, ceildiv(end - start, step))
    else:
        check(start >= 0 and (end is None or end >= 0), "slice: negative bounds need a static dim")
        length = ceildiv((size if end is None else sympy.Min(size, end)) - start, step)
    return TensorType((*x.shape[:d], length, *x.shape[d + 1:]), x.dtype, "", x.device)


def _slice(x: torch.Tensor, a) -> torch.Tensor:
    index = [slice(None)] * x.dim()
    index[a["dim"]] = slice(a["start"], a["end"], a["step"])
    return x[tuple(index)].contiguous()


register(OpDef("slice", ("x",),
               (AttrSpec("dim", "int", 0), AttrSpec("start", "int", 0),
                AttrSpec("end", "any", None), AttrSpec("step", "int", 1)),
               _slice_type, lambda xs, a: _slice(xs[0], a), SHAPE, lowering="move",
               doc="x[start:end:step] along dim (end None: to the end)", shapes=movement.slice_))


def _select_type(ts: list[TensorType], a) -> TensorType:
    x = ts[0]
    d = norm_dims(a["dim"], x.rank, "select")[0]
    if is_static(x.shape[d]):
        check(-x.shape[d] <= a["index"] < x.shape[d], f"select: index {a['index']} out of range")
    return TensorType(x.shape[:d] + x.shape[d + 1:], x.dtype, "", x.device)


register(OpDef("select", ("x",), (AttrSpec("dim", "int"), AttrSpec("index", "int")), _select_type,
               lambda xs, a: xs[0].select(a["dim"], a["index"]).contiguous(), SHAPE,
               lowering="move",
               doc="x[..., index, ...] along dim (the dim is removed)", shapes=movement.select))
