"""The Cuvil graph: typed values produced by nodes, in topological order.

Every node produces one value, named like the node. Graph inputs are `input` nodes,
imported weights are `const` nodes that hold a reference into `Graph.constants` (never a
copy), scalars are 0-d `scalar` nodes. Outputs are a nested structure (tuple/list/dict) of
value names, so a compiled model returns what the torch model returned. `mutations` names,
for each input the model writes in place, the value the call writes into it: the graph
itself is functional, and those values are outputs too (`outputs` lists them last).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import torch

from cuvil.errors import IRError
from cuvil.ir.structure import Structure, flatten, map_names, unflatten
from cuvil.ir.types import DType, TensorType


class Catalog(Protocol):
    """What the IR needs of the op catalog (`cuvil.ops.registry`, which installs itself)."""

    def exists(self, op: str, defs: Any = None) -> bool: ...
    def get(self, op: str, defs: Any = None) -> Any: ...
    def infer(self, op: str, types: list[TensorType], attrs: dict[str, Any], source: str = "",
              defs: Any = None) -> TensorType: ...


_catalog: Catalog | None = None


def use_catalog(catalog: Catalog) -> None:
    """Install the op catalog that types nodes (the IR sits below the catalog, so it is given)."""
    global _catalog
    _catalog = catalog


def catalog() -> Catalog:
    if _catalog is None:
        raise IRError("no op catalog is loaded: build graphs with cuvil.Graph, or import "
                      "cuvil.ops.registry first")
    return _catalog


@dataclass(frozen=True)
class Node:
    """One op application; `name` is also the name of the value it produces."""

    name: str
    op: str
    inputs: tuple[str, ...]
    attrs: dict[str, Any]
    type: TensorType
    source: str = ""
    origin: tuple[str, ...] = field(default=(), compare=False)

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def where(self) -> str:
        """`op` plus its source line, for error messages."""
        return f"{self.name} = {self.op}" + (f" (from {self.source})" if self.source else "")


class Graph:
    """A Cuvil graph. Build with `input`, `const`, `scalar`, `add`; end with `set_outputs`."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.nodes: dict[str, Node] = {}
        self.inputs: list[str] = []
        self.output_structure: Structure = ()
        self.constants: dict[str, torch.Tensor] = {}
        self.defs: dict[str, Any] = {}  # composite ops (from `.cvr`) this graph uses
        self.report: Any = None
        self.import_report: Any = None  # what the frontend did (cuvil.frontend.ImportReport)
        self.output_tree: Any = None  # the model's own output containers (ir.outputs)
        # the sizes torch.export traced a dim for, where its code narrowed them (the program
        # is the model's for those alone): dim name -> (least, most), None where unbounded
        self.dim_ranges: dict[str, tuple[int | None, int | None]] = {}
        # what calibration observed of values: node name -> {"absmax", "scale", "zero_point"}
        self.facts: dict[str, dict[str, Any]] = {}
        # the inputs the model writes in place: input name -> the value written into it
        self.mutations: dict[str, str] = {}
        # how each computed constant is made from the model's tensors (`ir.recipe`); None
        # where that is not known (a graph read from a cache)
        self.recipes: dict[str, Any] | None = None
        self._counter = 0

    # -- building ---------------------------------------------------------------------------
    def fresh(self, hint: str = "v") -> str:
        while True:
            self._counter += 1
            name = f"{hint}{self._counter}"
            if name not in self.nodes:
                return name

    def _put(self, node: Node) -> str:
        if node.name in self.nodes:
            raise IRError(f"value {node.name!r} defined twice")
        self.nodes[node.name] = node
        return node.name

    def input(self, name: str, type: TensorType) -> str:
        self.inputs.append(name)
        return self._put(Node(name, "input", (), {}, type))

    def const(self, tensor: torch.Tensor, ref: str | None = None, name: str | None = None,
              layout: str = "") -> str:
        """A constant held by reference: `Graph.constants[ref]` is `tensor` itself."""
        ref = ref or self.fresh("c")
        if ref in self.constants and self.constants[ref] is not tensor:
            raise IRError(f"constant {ref!r} defined twice")
        self.constants[ref] = tensor
        t = TensorType(tuple(tensor.shape), DType.from_torch(tensor.dtype), layout)
        return self._put(Node(name or _ident(ref), "const", (), {"ref": ref}, t))

    def scalar(self, value: float | int | bool, dtype: DType | None = None,
               name: str | None = None) -> str:
        if dtype is None:
            dtype = DType.bool if isinstance(value, bool) else (
                DType.i64 if isinstance(value, int) else DType.f32)
        attrs = {"value": value, "dtype": str(dtype)}
        return self._put(Node(name or self.fresh("s"), "scalar", (), attrs,
                                    TensorType((), dtype, weak=True)))

    def add(self, op: str, inputs: Iterable[str], attrs: dict[str, Any] | None = None, *,
            type: TensorType | None = None, name: str | None = None, source: str = "",
            origin: tuple[str, ...] = ()) -> str:
        """Append `op(inputs, **attrs)`; its type is inferred by the op catalog if not given."""
        registry = catalog()
        inputs = tuple(inputs)
        for i in inputs:
            if i not in self.nodes:
                raise IRError(f"{op}: input {i!r} is not defined" + _at(source))
        attrs = registry.get(op, self.defs).complete_attrs(attrs or {}, where=f"{op}{_at(source)}")
        if type is None:
            type = registry.infer(op, [self.nodes[i].type for i in inputs], attrs, source,
                                  self.defs)
        return self._put(Node(name or self.fresh(), op, inputs, attrs, type, source, origin))

    def set_outputs(self, structure: Structure) -> None:
        for name in flatten(structure):
            if name not in self.nodes:
                raise IRError(f"output {name!r} is not defined")
        self.output_structure = structure

    def set_mutations(self, mutations: dict[str, str]) -> None:
        """Say that a call writes value `mutations[x]` into input `x`, as the model does."""
        for name, value in mutations.items():
            if name not in self.inputs:
                raise IRError(f"written input {name!r} is not an input")
            if value not in self.nodes:
                raise IRError(f"value {value!r} written into input {name!r} is not defined")
        self.mutations = dict(mutations)

    def replace_node(self, node: Node) -> None:
        """Swap the definition of an existing value (same name, same position)."""
        if node.name not in self.nodes:
            raise IRError(f"no value {node.name!r}")
        self.nodes[node.name] = node

    # -- reading ----------------------------------------------------------------------------
    @property
    def outputs(self) -> list[str]:
        """The values a call computes: the returned ones, then those written into inputs."""
        return [*flatten(self.output_structure), *self.mutations.values()]

    def rebuild_outputs(self, values: dict[str, Any]) -> Any:
        """The outputs as the model returns them: in its own containers when the graph has
        an `output_tree`, else in `output_structure`'s tuples, lists and dicts."""
        if self.output_tree is not None:
            return self.output_tree.rebuild([values[n] for n in flatten(self.output_structure)])
        return unflatten(self.output_structure, values)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes.values())

    def __len__(self) -> int:
        return len(self.nodes)

    def __getitem__(self, name: str) -> Node:
        return self.nodes[name]

    def type_of(self, name: str) -> TensorType:
        return self.nodes[name].type

    def users(self) -> dict[str, list[str]]:
        result: dict[str, list[str]] = {n: [] for n in self.nodes}
        for node in self:
            for i in node.inputs:
                result[i].append(node.name)
        return result

    def ops(self) -> list[str]:
        return [n.op for n in self if n.op not in ("input", "const", "scalar")]

    def copy(self) -> Graph:
        g = Graph(self.name)
        g.nodes = dict(self.nodes)
        g.inputs = list(self.inputs)
        g.output_structure = self.output_structure
        g.constants = dict(self.constants)
        g.defs = dict(self.defs)
        g.import_report = self.import_report
        g.output_tree = self.output_tree
        g.dim_ranges = dict(self.dim_ranges)
        g.facts = dict(self.facts)
        g.mutations = dict(self.mutations)
        g.recipes = None if self.recipes is None else dict(self.recipes)
        g._counter = self._counter
        return g

    def prune(self) -> Graph:
        """A copy without the nodes that no output depends on (inputs are kept)."""
        live = set(self.outputs) | set(self.inputs)
        for node in reversed(list(self)):
            if node.name in live:
                live.update(node.inputs)
        g = self.copy()
        g.nodes = {k: v for k, v in self.nodes.items() if k in live}
        refs = {n.attrs["ref"] for n in g if n.op == "const"}
        g.constants = {k: v for k, v in self.constants.items() if k in refs}
        return g

    def with_types(self, types: dict[str, TensorType]) -> Graph:
        g = self.copy()
        for name, t in types.items():
            g.nodes[name] = replace(g.nodes[name], type=t)
        return g

    # -- text, hash, verification ------------------------------------------------------------
    def to_text(self) -> str:
        from cuvil.ir.text import print_graph

        return print_graph(self)

    __str__ = to_text

    @staticmethod
    def from_text(text: str, constants: dict[str, torch.Tensor] | None = None) -> Graph:
        from cuvil.ir.text import parse_graph

        return parse_graph(text, constants)

    def verify(self) -> Graph:
        from cuvil.ir.verify import verify

        verify(self)
        return self

    def structural_hash(self) -> str:
        """A hash of the computation that ignores value names (and the graph's name)."""
        from cuvil.ir.text import format_attrs

        keys: dict[str, str] = {}
        for node in self:
            parts = [node.op, format_attrs(node.attrs), str(node.type)]
            if node.op == "input":
                parts.append(str(self.inputs.index(node.name)))
            parts += [keys[i] for i in node.inputs]
            keys[node.name] = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()
        out = map_names(self.output_structure, lambda name: keys[name])
        signature = [keys[name] for name in self.inputs]  # unused inputs are called with too
        whole = (out, signature)
        if self.mutations:  # a graph without them hashes as it always did
            whole += (sorted((self.inputs.index(i), keys[v]) for i, v in self.mutations.items()),)
        return hashlib.sha256(repr(whole).encode()).hexdigest()[:16]


def _ident(ref: str) -> str:
    text = "".join(c if c.isalnum() else "_" for c in ref)
    return text if text and not text[0].isdigit() else f"c_{text}"


def _at(source: str) -> str:
    return f" (from {source})" if source else ""
