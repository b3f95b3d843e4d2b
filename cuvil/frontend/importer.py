"""The importer: walks an aten-level FX graph and builds the Cuvil graph and its report.

Each FX node becomes catalog nodes through its converter in `aten.ATEN`; symbolic-int
nodes (`sym_size`, `s0 * 4`) become dims, never nodes; an op without a converter becomes an
opaque `torch_op` (or, when all its inputs are constants, a constant computed here). Every
node built is checked against the type torch computed for it (`meta["val"]`).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import sympy
import torch
from torch import fx
from torch.utils import _pytree as pytree

from cuvil.errors import CuvilError, ShapeError, UnsupportedOpsError
from cuvil.frontend.aten import ATEN, Fallback, Value
from cuvil.frontend.dims import DimTable
from cuvil.frontend.functional import assert_functional
from cuvil.frontend.report import ImportReport, Source, source_of
from cuvil.frontend.values import Traced, UserInput, Weight
from cuvil.ir.dim_text import range_text
from cuvil.ir.graph import Graph, _ident
from cuvil.ir.outputs import OutputTree, needs_tree
from cuvil.ir.recipe import UNKNOWN, Call, Ref, apply, evaluate, op_term, pickles
from cuvil.ir.torch_template import encode_arg, known_pure
from cuvil.ir.types import Dim, DType, TensorType


@dataclass(frozen=True)
class _Results:
    """An op without a converter that returns several tensors; `getitem` picks one."""

    node: fx.Node


class Importer:
    def __init__(self, traced: Traced):
        self.traced = traced
        self.graph = Graph(_ident(traced.name))
        self.graph.recipes = {}
        self.dims = DimTable()
        self.report = ImportReport(traced.name, notes=list(traced.notes))
        self.env: dict[str, Any] = {}  # FX node name -> Value, tuple, dim or None
        self.consts: dict[str, Value] = {}  # constant ref -> its value
        # a value that is gradients at some indices of a dim, zeros elsewhere -> (its
        # shape, the dim, index -> gradient): `aten_gradients.scattered`
        self.scatters: dict[Value, tuple] = {}
        self.node: fx.Node | None = None
        self.source = Source()

    # -- the walk ---------------------------------------------------------------------------
    def build(self, strict: bool = False) -> Graph:
        for node in self.traced.graph.nodes:
            self.node, self.source = node, source_of(node)
            if node.op in ("placeholder", "get_attr"):
                self.env[node.name] = self.leaf(node)
            elif node.op == "call_function":
                self.env[node.name] = self.call(node)
            elif node.op != "output":
                raise CuvilError(f"cannot import FX node {node.op} {node.target}")
        if strict and self.report.fallbacks:
            raise UnsupportedOpsError([(op, str(src)) for op, src in self.report.fallbacks])
        self.graph.set_outputs(self.output_structure())
        self.graph.set_mutations(self.written_inputs())
        graph = self.graph.prune()
        alias = self.traced.size_alias
        graph.dim_ranges = self.dims.narrowed(self.traced.ranges, from_two=alias is not None)
        self.report.dynamic_dims = dict(self.dims.origin)
        if alias is not None and graph.dim_ranges:
            self.report.notes.append(f"{alias} at size 1 alone: sizes of 1 are refused")
        self.report.notes += [f"torch.export traced {d} for sizes {range_text(*r)} alone (the "
                              "spec says so, or the code branches on it): other sizes are refused"
                              for d, r in graph.dim_ranges.items()]
        self.report.nodes = len(graph)
        graph.import_report = self.report
        return graph.verify()

    def leaf(self, node: fx.Node) -> Any:
        leaf = self.traced.leaves.get(node.name)
        if isinstance(leaf, Weight):
            return self.weight(leaf.tensor, leaf.ref)
        if leaf is None:
            raise CuvilError(f"cannot import graph input {node.name!r}")
        fake = node.meta.get("val")
        if not isinstance(fake, torch.Tensor):
            self.report.notes.append(f"input {leaf.name} = {fake!r} is fixed at import")
            return fake
        for d, size in enumerate(fake.shape):
            if isinstance(size, torch.SymInt):
                self.dims.learn(size, self.dim_name(leaf, d, size), f"{leaf.name} dim {d}")
        t = TensorType(self.dims.shape(fake.shape), DType.from_torch(fake.dtype))
        return Value(self.graph.input(self.unique(_ident(leaf.name)), t))

    def dim_name(self, leaf: UserInput, d: int, size: torch.SymInt) -> str:
        """The user's Dim name, else torch's debug name for it, else `batch` / `x_d2`."""
        name = self.traced.dim_names.get((leaf.index, d))
        if name is None:
            table = getattr(size.node.shape_env, "source_name_to_debug_name", {})
            name = table.get(f"L['{leaf.name}'].size()[{d}]")
        return name or ("batch" if d == 0 else f"{leaf.name}_d{d}")

    def call(self, node: fx.Node) -> Any:
        assert_functional(node)
        fake = node.meta.get("val")
        if node.target is operator.getitem:
            return self.getitem(node)
        if not _has_tensors(fake):
            return self.python_value(fake)
        convert = ATEN.get(_packet(node.target))
        if convert is not None:
            try:
                result = convert(self, self.arguments(node))
            except (Fallback, ShapeError) as e:
                self.report.notes.append(f"{node.target} runs in torch: {e} has no catalog "
                                         "form")
            else:
                self.check(result, fake)
                return result
        return self.unsupported(node)

    def getitem(self, node: fx.Node) -> Any:
        source, index = node.args
        value = self.env[source.name]
        if not (isinstance(value, _Results) or isinstance(value, tuple) and value[index] is None):
            return value[index]  # a result a converter built
        if source.meta["val"][index] is None:
            return None  # a result a backward op's mask skips
        if isinstance(value, _Results):
            return self.torch_op(value.node, index)
        self.report.fallbacks.append((str(source.target), self.source))  # no catalog form
        return self.torch_op(source, index)

    def output_structure(self) -> Any:
        names = []
        for i, out in enumerate(self.traced.outputs):
            value = self.env.get(out.name) if isinstance(out, fx.Node) else out
            if not isinstance(value, Value):
                raise CuvilError(f"output {i} of {self.traced.name} is not a tensor "
                                 f"({value!r}); Cuvil graphs return tensors")
            names.append(str(value))
        if needs_tree(self.traced.out_spec):  # a ModelOutput, a namedtuple, ...: kept aside
            self.graph.output_tree = OutputTree(self.traced.out_spec)
            return tuple(names)
        return _plain(pytree.tree_unflatten(names, self.traced.out_spec))

    def written_inputs(self) -> dict[str, str]:
        """Graph input -> the value a call writes into it, as the model writes it in place
        (`functional.py`); an input written with its own values is left out."""
        writes = {}
        for placeholder, node in self.traced.writes.items():
            target = self.env.get(placeholder)
            value = self.env.get(node.name) if isinstance(node, fx.Node) else None
            if not isinstance(target, Value) or not isinstance(value, Value):
                raise CuvilError(f"{self.traced.name} writes input {placeholder} in place "
                                 "with a value Cuvil does not build as a tensor")
            if value != target:
                writes[str(target)] = str(value)
                self.report.notes.append(f"the call writes input {target}, as the model does")
        return writes

    # -- what converters use ---------------------------------------------------------------
    def add(self, op: str, inputs: list[Value], attrs: dict | None = None) -> Value:
        name = self.graph.fresh(op + "_")
        return Value(self.graph.add(op, [str(i) for i in inputs], attrs or {}, name=name,
                                    source=self.source.where))

    def tensor(self, arg: Any) -> Value:
        """A tensor argument; a Python number becomes a 0-d `scalar` node."""
        if isinstance(arg, Value):
            return arg
        if isinstance(arg, bool | int | float):
            return Value(self.graph.scalar(arg))
        raise Fallback(f"expected a tensor, got {arg!r}")

    def type(self, value: Value) -> TensorType:
        return self.graph.type_of(value)

    def constant(self, value: Value) -> torch.Tensor | None:
        """The tensor behind `value` if it is a constant, else None."""
        node = self.graph[value]
        return self.graph.constants[node.attrs["ref"]] if node.op == "const" else None

    def ref(self, value: Value) -> str:
        return self.graph[value].attrs["ref"]

    def weight(self, tensor: torch.Tensor, ref: str) -> Value:
        """A constant held by reference (`graph.constants[ref] is tensor`), made once."""
        if ref not in self.consts:
            name = self.unique(_ident(ref))
            self.consts[ref] = Value(self.graph.const(tensor, ref=ref, name=name))
        return self.consts[ref]

    def folded(self, tensor: torch.Tensor, ref: str, recipe: Any = None) -> Value:
        """A constant computed at import (a new tensor, not a weight's copy); `recipe` says
        how, from other constants (`ir.recipe`: a weight swap computes it again), else it
        is the tensor itself."""
        self.graph.recipes.setdefault(ref, tensor.detach() if recipe is None else recipe)
        return self.weight(tensor.detach(), ref)

    def computed(self, ref: str, recipe: Any) -> Value:
        """The constant `recipe` computes from others (`ir.recipe`), folded under `ref`."""
        return self.folded(evaluate(recipe, lambda r: self.graph.constants[r]), ref, recipe)

    def filled(self, fill: float, shape: tuple[int, ...], dtype: DType = DType.f32) -> Value:
        """A constant of ones/zeros standing in for a missing norm weight/bias."""
        name = {1.0: "ones", 0.0: "zeros"}[fill] + ("" if dtype == DType.f32 else f"_{dtype}")
        return self.folded(torch.full(shape, fill, dtype=dtype.torch),
                           f"{name}_{'x'.join(map(str, shape))}")

    def op_name(self) -> str:
        return str(self.node.target)

    def out_fakes(self) -> list:
        fake = self.node.meta["val"]
        return list(fake) if isinstance(fake, tuple | list) else [fake]

    def out_shape(self) -> tuple[Dim, ...]:
        return self.dims.shape(self.node.meta["val"].shape)

    def unique(self, name: str) -> str:
        return name if name not in self.graph.nodes else self.graph.fresh(name + "_")

    # -- arguments, checks, fallbacks ------------------------------------------------------
    def arguments(self, node: fx.Node) -> dict[str, Any]:
        """The op's arguments by schema name (`self` as `input`), defaults filled in."""
        result = {}
        for i, spec in enumerate(node.target._schema.arguments):
            if i < len(node.args) and not spec.kwarg_only:
                value = node.args[i]
            elif spec.name in node.kwargs:
                value = node.kwargs[spec.name]
            else:
                value = spec.default_value if spec.has_default_value() else None
            result["input" if spec.name == "self" else spec.name] = self.value(value)
        return result

    def value(self, arg: Any) -> Any:
        if isinstance(arg, fx.Node):
            return self.env[arg.name]
        if isinstance(arg, tuple | list):
            return tuple(self.value(a) for a in arg)
        if isinstance(arg, dict):
            return {k: self.value(v) for k, v in arg.items()}
        if isinstance(arg, torch.SymInt):
            return self.dims.dim(arg)
        return arg

    def python_value(self, fake: Any) -> Any:
        """A non-tensor result (a size, an assertion): a dim or a plain value, no node."""
        if isinstance(fake, torch.SymInt):
            return self.dims.dim(fake)
        return fake  # a number, None, or a SymFloat/SymBool no op can take as an argument

    def check(self, result: Any, fake: Any) -> None:
        """Each value built must have the shape and dtype torch computed for it."""
        pairs = zip(result, fake, strict=False) if isinstance(result, tuple) else [(result, fake)]
        for value, want in pairs:
            if value is None:
                continue
            got = self.type(value)
            shape = self.dims.shape(want.shape)
            same = len(shape) == got.rank and all(
                sympy.simplify(sympy.sympify(a) - b) == 0 for a, b in zip(got.shape, shape,
                                                                          strict=True))
            if not same or got.dtype != DType.from_torch(want.dtype):
                wanted = TensorType(shape, DType.from_torch(want.dtype))
                raise CuvilError(f"{self.op_name()} at {self.source}: Cuvil infers {got}, "
                                 f"torch computes {wanted}")

    def unsupported(self, node: fx.Node) -> Any:
        if not isinstance(node.target, torch._ops.OpOverload):
            raise CuvilError(f"cannot import {node.target} at {self.source}: not an aten op")
        if self.foldable(node):
            return self.fold(node)
        self.report.fallbacks.append((str(node.target), self.source))
        if isinstance(node.meta["val"], tuple | list):
            return _Results(node)
        return self.torch_op(node)

    def torch_op(self, node: fx.Node, index: int | None = None, args: tuple | None = None
                 ) -> Value:
        """`node` run through torch (with `args` in place of its own, if given); its tensor
        arguments become inputs `$0`, `$1`, ..."""
        inputs: list[Value] = []

        def template(value: Any) -> Any:
            if isinstance(value, Value):
                if value not in inputs:
                    inputs.append(value)
                return f"${inputs.index(value)}"
            if isinstance(value, tuple | list):
                return tuple(template(v) for v in value)
            encoded = encode_arg(value)
            if encoded is not None:
                return encoded
            if value is None or isinstance(value, bool | int | float | str | sympy.Basic):
                return value
            raise CuvilError(f"{node.target} at {self.source}: cannot pass a "
                             f"{type(value).__name__} argument to torch")

        args = template(self.value(node.args if args is None else args))
        kwargs = tuple((k, template(self.value(v))) for k, v in node.kwargs.items())
        fake = node.meta["val"] if index is None else node.meta["val"][index]
        out = TensorType(self.dims.shape(fake.shape), DType.from_torch(fake.dtype))
        attrs = {"target": str(node.target), "args": args, "kwargs": kwargs, "index": index,
                 "out": str(out)}
        return Value(self.graph.add("torch_op", inputs, attrs, name=self.graph.fresh("torch_op_"),
                                    source=source_of(node).where))

    def foldable(self, node: fx.Node) -> bool:
        """All inputs constant, a static result, and not random: compute it now."""
        fake = node.meta["val"]
        if torch.Tag.nondeterministic_seeded in node.target.tags:
            return False
        if not isinstance(fake, torch.Tensor) or any(isinstance(s, torch.SymInt)
                                                     for s in fake.shape):
            return False
        values = pytree.tree_leaves(self.value((node.args, node.kwargs)))
        return all(not isinstance(v, Value) or self.constant(v) is not None for v in values)

    def fold(self, node: fx.Node) -> Value:
        """The op computed on the constants; on copies of them unless it is known to write
        none (a custom op may write its inputs, and they are the model's weights)."""
        pure = known_pure(str(node.target))

        def real(v):
            if not isinstance(v, Value):
                return v
            return self.constant(v) if pure else self.constant(v).clone()

        values = self.value((node.args, dict(node.kwargs)))
        args, kwargs = pytree.tree_map(real, values)
        result = node.target(*args, **kwargs)
        self.report.notes.append(f"computed at import: {node.target} at {self.source}")
        terms = pytree.tree_map(lambda v: Ref(self.ref(v)) if isinstance(v, Value) else v,
                                values)
        recipe = Call(apply, (op_term(node.target), *terms, not pure))
        recipe = recipe if pickles(recipe) else UNKNOWN
        return self.folded(result, f"folded.{node.name}", recipe)


def _packet(target: Any) -> str | None:
    if isinstance(target, torch._ops.OpOverload):
        return target.overloadpacket.__name__
    return None


def _has_tensors(fake: Any) -> bool:
    if isinstance(fake, tuple | list):
        return any(isinstance(f, torch.Tensor) for f in fake)
    return isinstance(fake, torch.Tensor)


def _plain(structure: Any) -> Any:
    """A pytree of value names as the tuples, lists and dicts a Cuvil graph returns."""
    if isinstance(structure, str):
        return structure
    if isinstance(structure, dict):
        return {k: _plain(v) for k, v in structure.items()}
    if isinstance(structure, list):
        return [_plain(v) for v in structure]
    if isinstance(structure, tuple):
        return tuple(_plain(v) for v in structure)
    raise CuvilError(f"cannot return a {type(structure).__name__} from a Cuvil graph")
