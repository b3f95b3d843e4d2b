"""The Cuvil -> ONNX mapping of advanced indexing and the ops made from a size or a shift
(`ops/indexing.py`, `ops/misc.py`), for the exporter.

    index(x, i, start=s)      Gather(x, i, axis=s)
    index(x, i0, i1, ..., s)  GatherND(x', [i0, i1, ...] stacked on a last axis): the index
                              tensors broadcast together (each plus the others times 0),
                              x' is x with dims s, s + 1, ... moved first, and the result's
                              picked dims moved back to s
    cumsum(x, dim)            CumSum over x cast to f64 (a float) or i64 (an integer or a
                              bool), as the catalog's reference sums, then cast back
    diff(x, dim)              Slice(x, 1:) - Slice(x, :-1) along dim (Xor for a bool)
    arange(n, start, step)    Range(0, n, 1) * step + start, in f64 for a float dtype (as
                              the catalog's reference computes it) and in i64 otherwise,
                              then cast; a symbolic n is read off the input that holds it
"""

from __future__ import annotations

from cuvil.ir.graph import Node
from cuvil.ir.types import DType
from cuvil.onnx.export import ELEM, Writer

INT64_MAX = 2**63 - 1


def index(w: Writer, node: Node) -> None:
    x, *picks = node.inputs
    start = node.attrs["start"]
    if len(picks) == 1:
        w.add("Gather", [w.arg(x), w.arg(picks[0])], out=node.name, axis=start)
        return
    rank = w.graph.type_of(x).rank
    columns = _broadcast(w, [w.arg(i, DType.i64) for i in picks])
    stacked = w.add("Concat", [w.add("Unsqueeze", [c, w.ints([-1])]) for c in columns], axis=-1)
    if start == 0:
        w.add("GatherND", [w.arg(x), stacked], out=node.name)
        return
    k = len(picks)
    front = [*range(start, start + k), *range(start), *range(start + k, rank)]
    gathered = w.add("GatherND", [w.add("Transpose", [w.arg(x)], perm=front), stacked])
    picked = node.type.rank - (rank - k)  # the rank of the broadcast index tensors
    back = [*range(picked, picked + start), *range(picked), *range(picked + start,
                                                                      node.type.rank)]
    w.add("Transpose", [gathered], out=node.name, perm=back)


def _broadcast(w: Writer, tensors: list[str]) -> list[str]:
    """`tensors` broadcast to their common shape: each plus the sum of all times 0 (no
    shape to compute, symbolic or not)."""
    zero = w.constant(0, DType.i64)
    total = tensors[0]
    for t in tensors[1:]:
        total = w.add("Add", [total, t])
    zeros = w.add("Mul", [total, zero])
    return [w.add("Add", [t, zeros]) for t in tensors]


def cumsum(w: Writer, node: Node) -> None:
    dtype = node.type.dtype
    wide = DType.f64 if dtype.is_float else DType.i64
    axis = w.constant(node.attrs["dim"], DType.i64)
    if dtype == wide:
        w.add("CumSum", [w.arg(node.inputs[0], wide), axis], out=node.name)
    else:
        total = w.add("CumSum", [w.arg(node.inputs[0], wide), axis])
        w.add("Cast", [total], out=node.name, to=ELEM[dtype])


def diff(w: Writer, node: Node) -> None:
    x = w.arg(node.inputs[0])
    axis = w.ints([node.attrs["dim"]])
    later = w.add("Slice", [x, w.ints([1]), w.ints([INT64_MAX]), axis])
    earlier = w.add("Slice", [x, w.ints([0]), w.ints([-1]), axis])
    op = "Xor" if node.type.dtype == DType.bool else "Sub"
    w.add(op, [later, earlier], out=node.name)


def arange(w: Writer, node: Node) -> None:
    a = node.attrs
    dtype = node.type.dtype
    count = w.add("Squeeze", [w.shape(node.type.shape), w.ints([0])])
    steps = w.add("Range", [w.constant(0, DType.i64), count, w.constant(1, DType.i64)])
    wide = DType.f64 if dtype.is_float else DType.i64
    if wide != DType.i64:
        steps = w.add("Cast", [steps], to=ELEM[wide])
    values = w.add("Add", [w.add("Mul", [steps, w.constant(a["step"], wide)]),
                           w.constant(a["start"], wide)])
    if dtype == wide:
        w.add("Identity", [values], out=node.name)
    else:
        w.add("Cast", [values], out=node.name, to=ELEM[dtype])


INDEX_EMITTERS = {"index": index, "cumsum": cumsum, "diff": diff, "arange": arange}
