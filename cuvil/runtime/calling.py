"""How a lowered program is called, as plain data: `CallSpec`.

A compiled graph needs, call by call, only this: the inputs' expected shapes (to bind the
symbolic dims and check the rest), the planned buffers and the outputs with their shapes,
and how the outputs are returned. Dims are held as text (`4*batch`, `floor(seq/2)`: the
IR's `format_dim`; a buffer's may also be "threads") and evaluated exactly, without sympy
(`ir/dim_text.py`), so that the program cache
(`cuvil/cache/programs.py`) can rebuild a compiled graph without importing the IR.

    spec = call_spec(graph, program, plan)       # runtime/build.py, at the end of lowering
    env = spec.bind(shapes, dtypes)              # {"batch": 64}, or a clear CuvilError
    buffers = spec.allocate(env, threads)        # one array per planned value
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from cuvil.errors import CuvilError
from cuvil.ir import devices
from cuvil.ir.dim_text import Dims, bind_shapes, size
from cuvil.ir.torch_template import TorchCall, known_pure
from cuvil.lower.bf16 import to_tensor

# numpy's dtype names -> the IR's (`ir.types.DType`; a test checks they agree)
DTYPE_NAMES = {"float32": "f32", "float16": "f16", "float64": "f64", "int8": "i8",
               "uint8": "u8", "int32": "i32", "int64": "i64", "bool": "bool",
               "uint16": "bf16"}


@dataclass(frozen=True)
class Param:
    name: str
    shape: Dims  # logical order
    dtype: str  # the IR's name (`f32`)
    perm: tuple[int, ...] | None = None  # for each physical dim, its logical dim (None: same)


@dataclass(frozen=True)
class Array:
    value: str  # the entry's parameter
    shape: Dims  # physical
    dtype: str  # numpy's name
    slot: int = -1  # a planned buffer's slot; -1: an output (a fresh array per call set)
    perm: tuple[int, ...] | None = None  # an output's logical order, as for `Param`


@dataclass(frozen=True)
class TorchFallback:
    """A fallback that is a `torch_op` on the CPU, as plain data: made without the graph.

    Results of one call of an op that returns several (`convolution_backward`'s input and
    weight gradients, a 16-bit training batch norm's output and statistics) are nodes of
    their own; `group` lists the positions (among the spec's fallbacks, in the order the
    entry calls them) of the nodes that share this one's call and inputs, itself included. The first
    of them runs the op and keeps its results for the others (per thread: concurrent calls
    of a graph each have their own), so the op runs once per call, as in eager."""

    call: TorchCall
    in_perms: tuple[tuple[int, ...], ...]  # each input's logical order (`logical_view`)
    out_perm: tuple[int, ...]
    group: tuple[int, ...] = ()  # positions of the fallbacks sharing this call, or ()

    def bound(self, env: dict[str, int], shared: threading.local | None = None,
              position: int = -1):
        """The fallback for these sizes of the symbolic dims: physical arrays in (the
        inputs, then the planned output), the result written into the output. `shared`
        holds the results of this fallback's `group`, of which it is the `position`-th:
        the first runs the op, the others read its results (their inputs are the first's,
        not viewed again)."""
        pure = known_pure(self.call.target)
        if shared is None or position < 0 or len(self.group) < 2:
            return self._alone(self.call.bound(env), pure)
        if position == self.group[0]:
            return self._first(replace(self.call, index=None).bound(env), shared, pure)
        return self._reader(self._alone(self.call.bound(env), pure), shared,
                            position == self.group[-1])

    def _tensors(self, arrays: tuple, pure: bool) -> list[torch.Tensor]:
        return private([logical_view(a, p) for a, p in zip(arrays, self.in_perms, strict=True)],
                       pure)

    def _alone(self, run: Callable, pure: bool) -> Callable:
        def call(*arrays: np.ndarray, own: bool = False) -> np.ndarray:
            tensors = self._tensors(arrays[:-1], pure)
            with torch.no_grad():
                return settle(run(tensors), arrays[-1], self.out_perm,
                              storages_of(tensors) if own else frozenset(), own)

        call.__name__ = "fallback_torch_op"
        return call

    def _first(self, whole: Callable, shared: threading.local, pure: bool) -> Callable:
        """The group's first: the op's one call, its results and its inputs' storages kept
        in `shared`."""
        index = self.call.index

        def call(*arrays: np.ndarray, own: bool = False) -> np.ndarray:
            tensors = self._tensors(arrays[:-1], pure)
            with torch.no_grad():
                shared.results, shared.storages = whole(tensors), storages_of(tensors)
                return settle(shared.results[index], arrays[-1], self.out_perm,
                              shared.storages, own)

        call.__name__ = "fallback_torch_op"
        return call

    def _reader(self, alone: Callable, shared: threading.local, last: bool) -> Callable:
        """A later member: its result from `shared` (the op itself where none is kept); the
        group's last reader lets the results go."""
        index = self.call.index

        def call(*arrays: np.ndarray, own: bool = False) -> np.ndarray:
            results, storages = getattr(shared, "results", None), getattr(shared, "storages", None)
            if last:
                shared.results = shared.storages = None
            if results is None:
                return alone(*arrays, own=own)
            with torch.no_grad():
                return settle(results[index], arrays[-1], self.out_perm, storages, own)

        call.__name__ = "fallback_torch_op"
        return call


def storages_of(tensors: list[torch.Tensor]) -> frozenset[int]:
    """Where the tensors' storages start: what `settle` checks a result's memory against."""
    return frozenset(t.untyped_storage().data_ptr() for t in tensors)


def settle(result: torch.Tensor, dest: np.ndarray, perm: tuple[int, ...],
           storages: frozenset[int], own: bool = False) -> np.ndarray:
    """The array that holds a fallback's `result`. With `own` (the entry uses what this
    returns in place of the planned buffer `dest`, `codegen`), torch's own memory, viewed
    in the planned physical order, where it has exactly the planned buffer's shape, dtype
    and dense strides and is memory of its own (none of the inputs' `storages`: the plan
    may reuse an input's buffer while this value lives); else `dest`, with the result
    copied in."""
    physical = result if perm == _identity(len(perm)) else result.permute(perm)
    if (own and physical.is_contiguous() and physical.shape == dest.shape
            and physical.dtype is not torch.bfloat16 and not physical.requires_grad
            and result.untyped_storage().data_ptr() not in storages):
        array = physical.numpy()
        if array.dtype == dest.dtype:
            return array
    logical_view(dest, perm).copy_(result)
    return dest


@functools.cache
def _identity(rank: int) -> tuple[int, ...]:
    """The order of dims of this rank that moves none."""
    return tuple(range(rank))


def fallback_groups(calls: list[tuple[TorchCall, tuple]]) -> list[tuple[int, ...]]:
    """For each fallback (its `TorchCall`, or None, and its input values), the positions of
    the fallbacks that are results of one call of the same op on the same inputs (its own
    included; () where it is alone)."""
    keys = [None if call is None or call.index is None else
            (replace(call, index=None), inputs) for call, inputs in calls]
    groups = []
    for key in keys:
        members = tuple(i for i, k in enumerate(keys) if key is not None and k == key)
        groups.append(members if len(members) > 1 else ())
    return groups


@dataclass(frozen=True)
class CallSpec:
    name: str  # the graph's
    params: tuple[Param, ...]
    buffers: tuple[Array, ...]  # in the entry's order
    outputs: tuple[Array, ...]  # in the entry's order
    slots: tuple[tuple[str, str], ...]  # each slot's (dtype, device)
    symbols: tuple[str, ...]  # the dims `entry` takes as `n_<name>`, in its order
    results: dict[str, str]  # output name -> the entry's output value
    structure: Any  # the graph's output structure (names in tuples, lists and dicts)
    fallbacks: tuple[str, ...] = ()  # nodes run through torch
    own_containers: bool = False  # outputs in the model's own containers (the graph's tree)
    output_tree: str | None = None  # their text (`ir.outputs.OutputTree.text`), if it has one
    # each fallback's call as plain data, or None where making it needs the graph
    torch_calls: tuple[TorchFallback | None, ...] = ()
    ranges: tuple[tuple[str, int | None, int | None], ...] = ()  # the graph's `dim_ranges`
    # the inputs a call writes, as the model writes them in place: (input's position, the
    # entry's output value written into it), after the entry (the graph's `mutations`)
    writes: tuple[tuple[int, str], ...] = ()

    def bind(self, shapes: list[tuple[int, ...]], dtypes: list[str] | None = None) -> dict:
        """The sizes of the symbolic dims, read off the inputs' logical shapes; a clear
        error on any mismatch or size out of range (`ir.dim_text.bind_shapes`), or a symbol
        no input sets."""
        env = bind_shapes([(p.name, p.shape, p.dtype) for p in self.params], shapes, dtypes,
                          {d: (least, most) for d, least, most in self.ranges})
        missing = [s for s in self.symbols if s not in env]
        if missing:
            raise CuvilError(f"dims {', '.join(missing)} are not set by any input shape")
        return env

    def slot_sizes(self, env: dict[str, int], threads: int) -> list[int]:
        """Elements per slot: its largest value's at these sizes."""
        sizes = [0] * len(self.slots)
        for b in self.buffers:
            sizes[b.slot] = max(sizes[b.slot], math.prod(shape_of(b.shape, env, threads)))
        return sizes

    def allocate(self, env: dict[str, int], threads: int) -> list:
        """One array per planned buffer, views into slots sized for `env`."""
        slots = [empty(n, dtype, device) for n, (dtype, device) in
                 zip(self.slot_sizes(env, threads), self.slots, strict=True)]
        out = []
        for b in self.buffers:
            shape = shape_of(b.shape, env, threads)
            out.append(slots[b.slot][:math.prod(shape)].reshape(shape))
        return out

    def output_shapes(self, env: dict[str, int]) -> list[tuple[tuple[int, ...], np.dtype]]:
        return [(shape_of(o.shape, env), np.dtype(o.dtype)) for o in self.outputs]


def shape_of(dims: Dims, env: dict[str, int], threads: int = 1) -> tuple[int, ...]:
    return tuple(threads if d == "threads" else size(d, env) for d in dims)


def private(tensors: list[torch.Tensor], pure: bool) -> list[torch.Tensor]:
    """A fallback's inputs as its op may see them: the tensors themselves if the op is known
    to write none of them, else copies. An input may be the caller's tensor or a constant
    (a model's weight), which the runtime never writes."""
    return tensors if pure else [t.clone() for t in tensors]


def logical_view(array: np.ndarray, perm: tuple[int, ...]):
    """The torch tensor, in logical dim order, over a physical array."""
    t = to_tensor(array)
    if perm == tuple(range(len(perm))):
        return t
    return t.permute([perm.index(d) for d in range(len(perm))])


def empty(n: int, dtype: str, device: str):
    """A flat array of `n` elements on `device`, made by its target's hook (the host's
    is cache-line aligned: vectors loaded from a buffer touch one line)."""
    return devices.device(device).allocate(n, dtype)
