"""What kernel generators may ask while lowering one graph: types, constants, scalars.

Constants are numpy arrays in physical layout (an `NHWC` constant is stored permuted).
Generators may add derived constants (`prepare`: a transposed weight, folded batch-norm
factors), computed once at compile time and passed to kernels like any other constant; one
computed from constants is made by `prepare_from` (the function and the constants it
reads), so that `refreshed` computes it again for new weights (`runtime/swap.py`).
A constant in a format only the runtime knows (the int8 kernels' packed weights) is
declared instead (`derive`): a recipe name, its inputs and the arrays' types; the runtime's
build step computes it (`cuvil.runtime.derived`) and checks it against those types.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch

from cuvil.aligned import contiguous
from cuvil.ir.graph import Graph
from cuvil.ir.types import DType, TensorType
from cuvil.lower.bf16 import from_tensor
from cuvil.lower.physical import layout_perm, reference_numel
from cuvil.lower.spec import Scratch

# At run time, outputs smaller than this run serially: waking the thread pool costs ~5 us.
PAR_MIN = 1 << 15
# At compile time, a kernel gets a parallel loop only if its work, with every symbolic dim at
# SYMBOLIC_DIM_SIZE, reaches this: a parallel kernel compiles in ~1 s, a serial one in ~0.3 s.
PAR_STATIC_MIN = 1 << 17


@dataclass(frozen=True, eq=False)
class Derived:
    """Constants the runtime computes at build time: `recipe` (a name the runtime's
    `derived.RECIPES` maps to a function) of `inputs`, giving the arrays `parts`;
    `inputs` is `bind(*arrays of sources)`."""

    recipe: str
    inputs: dict
    parts: tuple[str, ...]
    bind: Callable[..., dict]
    sources: tuple[str, ...]


class LowerContext:
    def __init__(self, graph: Graph, threads: int, par_min: int = PAR_MIN,
                 instances: dict | None = None):
        self.graph = graph
        self.instances = instances or {}  # composite node name -> inline.Instance
        self.rule_where = rule_locations(graph.report)
        self.threads = threads
        self.par_min = par_min
        self.extra_types: dict[str, TensorType] = {}
        self.views: dict[str, tuple[str, TensorType]] = {}  # see `view`
        self.arrays: dict[str, np.ndarray] = {}
        self.scratch: dict[str, Scratch] = {}
        self.derived: dict[str, tuple[Derived, str]] = {}  # value -> (recipe, part)
        self.recipes: dict[str, tuple[Callable, tuple[str, ...]]] = {}  # see `prepare_from`
        self.users = {k: list(dict.fromkeys(v)) for k, v in graph.users().items()}

    def worth_parallel(self, shape: tuple, work_per_element: float = 1.0) -> bool:
        """Whether a kernel over `shape` should be compiled with a parallel loop."""
        return self.threads > 1 and \
            reference_numel(shape) * work_per_element >= PAR_STATIC_MIN

    def type(self, value: str) -> TensorType:
        if value in self.extra_types:
            return self.extra_types[value]
        if value in self.views:
            return self.views[value][1]
        return self.graph[value].type

    def view(self, root: str, shape: tuple) -> str:
        """A value of lowering's own: `root`'s array (C-contiguous) seen with another
        shape, for a driver that wants it so; the module passes `root.reshape(shape)`."""
        name = _ident(f"{root}.as.{'.'.join(map(str, shape))}")
        self.views[name] = (root, TensorType(shape, self.type(root).dtype))
        return name

    def is_const(self, value: str) -> bool:
        return value in self.extra_types or (
            value in self.graph.nodes and self.graph[value].op == "const")

    def scalar_value(self, value: str):
        node = self.graph.nodes.get(value)
        return node.attrs["value"] if node is not None and node.op == "scalar" else None

    def const_array(self, value: str) -> np.ndarray:
        """The physical numpy array of a constant (graph constant, scalar or prepared); a
        bf16 one holds its bits (`physical.storage`)."""
        if value in self.derived:
            raise KeyError(f"{value} is computed by the runtime (ctx.derived)")
        if value not in self.arrays:
            node = self.graph[value]
            if node.op == "scalar":
                array = from_tensor(torch.tensor(node.attrs["value"],
                                                 dtype=node.type.dtype.torch))
            else:
                array = from_tensor(self.graph.constants[node.attrs["ref"]].detach())
                array = contiguous(array.transpose(layout_perm(node.type)))
            self.arrays[value] = array
        return self.arrays[value]

    def prepare(self, key: str, array: np.ndarray) -> str:
        """Register a constant derived at compile time; returns its value name."""
        name = _ident(key)
        array = contiguous(array)
        self.arrays[name] = array
        self.extra_types[name] = TensorType(array.shape, _dtype(array.dtype), "contiguous")
        return name

    def prepare_from(self, key: str, fn: Callable[..., np.ndarray], *values: str) -> str:
        """`prepare` of `fn(*arrays of constants values)`, which a weight swap calls again
        on the new constants (`refreshed`)."""
        name = self.prepare(key, fn(*(self.const_array(v) for v in values)))
        self.recipes.setdefault(name, (fn, values))
        return name

    def derive(self, key: str, recipe: str, parts: dict[str, TensorType],
               bind: Callable[..., dict], *sources: str | None) -> list[str]:
        """Declare constants the runtime computes (`Derived`) from `bind(*arrays of
        sources)` (None for a source: None); their value names, in the order of `parts`
        (part name -> the array's type)."""
        inputs = bind(*self._arrays(sources))
        derived = Derived(recipe, inputs, tuple(parts), bind, sources)
        names = []
        for part, t in parts.items():
            name = _ident(f"{key}.{part}")
            self.extra_types[name] = t
            self.derived[name] = (derived, part)
            names.append(name)
        return names

    def _arrays(self, values) -> list[np.ndarray | None]:
        return [None if v is None else self.const_array(v) for v in values]

    def refreshed(self, graph: Graph) -> LowerContext:
        """This context for `graph`, the same graph with new constants: every array
        derived from constants computed again, in the order lowering made them."""
        ctx = copy.copy(self)
        ctx.graph = graph
        ctx.arrays = {k: a for k, a in self.arrays.items()
                      if k in self.extra_types and k not in self.recipes}
        for name, (fn, values) in self.recipes.items():
            ctx.arrays[name] = _same_form(name, contiguous(fn(*ctx._arrays(values))),
                                          self.arrays[name])
        again: dict[int, Derived] = {}  # one declaration gives several parts
        for d, _ in self.derived.values():
            again.setdefault(id(d), replace(d, inputs=d.bind(*ctx._arrays(d.sources))))
        ctx.derived = {v: (again[id(d)], part) for v, (d, part) in self.derived.items()}
        return ctx

    def add_scratch(self, key: str, scratch: Scratch) -> str:
        name = _ident(key)
        self.scratch[name] = scratch
        return name


def rule_locations(report) -> dict[str, str]:
    """Rule label -> `path:line`, from the optimizer's report when the graph has one."""
    rules = getattr(report, "rules", None)
    if not isinstance(rules, dict):
        return {}
    return {label: stat.where for label, stat in rules.items() if getattr(stat, "where", "")}


def _same_form(name: str, array: np.ndarray, old: np.ndarray) -> np.ndarray:
    if array.dtype != old.dtype or array.shape != old.shape:
        raise ValueError(f"{name} is now {array.dtype} {array.shape}, was {old.dtype} "
                         f"{old.shape}")
    return array


def _dtype(dt: np.dtype) -> DType:
    for d in DType:
        if d is not DType.bf16 and d.numpy == dt:
            return d
    raise ValueError(f"no Cuvil dtype for {dt}")


def _ident(key: str) -> str:
    return "p_" + re.sub(r"\W", "_", key)
