"""`CompiledGraph`: a lowered graph as a callable taking and returning torch tensors.

A call converts its inputs to numpy without copying, finds the buffers planned for these
input shapes (planned once per set of shapes, checked with a clear error on the first
call), takes output arrays, and calls the generated `entry` function once. Outputs are
torch tensors over those arrays: they never alias a buffer that a later call reuses.

Output arrays are recycled only when nothing refers to them any more: not the tensor
returned, nor any view of it (a view keeps the tensor's storage, which keeps the array).
A fresh 40 MB array costs ~12 ms of page faults here, a recycled one nothing. Calls from
several threads take turns (a lock): they share the planned buffers.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np
import torch

from cuvil.errors import CuvilError
from cuvil.ir.graph import Graph
from cuvil.ir.types import DType, eval_dim
from cuvil.lower.physical import layout_perm
from cuvil.lower.report import CompileReport
from cuvil.ops.execute import bind_symbols
from cuvil.runtime.fallback import logical_view, make_fallback
from cuvil.runtime.plan import MemoryPlan

MAX_PLANS = 16  # sets of input shapes whose buffers a compiled graph keeps
KEEP_OUTPUTS = 2  # output sets kept per shape set (`y = f(x)` holds one while making the next)

_DTYPES = {d.numpy: d for d in DType if d is not DType.bf16}
_calling = threading.local()  # the Numba thread count this thread last set


def _free_refcount() -> int | None:
    """`sys.getrefcount` of an array held only by a list, seen as `output_arrays` sees it;
    None (never recycle) if this Python does not count one more for another holder."""
    arrays = [np.empty(1)]
    free = next(sys.getrefcount(a) for a in arrays)
    held = arrays[0]  # noqa: F841 (one more reference)
    return free if next(sys.getrefcount(a) for a in arrays) > free else None


_FREE = _free_refcount()


@dataclass
class _EnvPlan:
    env: dict[str, int]
    buffers: list[np.ndarray]
    outputs: list[tuple[tuple[int, ...], np.dtype]]
    symbols: tuple[int, ...]
    fallbacks: list
    spare: list = field(default_factory=list)  # output array sets, recycled when unused

    def output_arrays(self) -> list[np.ndarray]:
        """A set of output arrays that nothing outside this plan refers to any more."""
        for arrays in self.spare:
            if _FREE is not None and all(sys.getrefcount(a) == _FREE for a in arrays):
                return arrays
        arrays = [np.empty(shape, dtype) for shape, dtype in self.outputs]
        self.spare = [*self.spare[-(KEEP_OUTPUTS - 1):], arrays]
        return arrays


class CompiledGraph:
    """Call with torch tensors or numpy arrays; returns the graph's output structure."""

    def __init__(self, graph: Graph, program, entry, consts: list[np.ndarray],
                 plan: MemoryPlan, report: CompileReport, threads: int):
        self.graph = graph
        self.source: str = program.text
        self.report = report
        self.threads = threads
        self._program = program
        self._entry = entry
        self._consts = consts
        self._plan = plan
        self._plans: OrderedDict[tuple, _EnvPlan] = OrderedDict()
        self._last: tuple | None = None  # (key, plan, args before, args after the outputs)
        self._lock = threading.Lock()
        arrays = program.arrays
        self._params = [(n, graph[n].type) for n in graph.inputs]
        self._in_perms = [_non_identity(layout_perm(t)) for _, t in self._params]
        self._buffer_values = [v for v in program.entry_params
                               if arrays[v].kind in ("buffer", "scratch")]
        self._output_values = [v for v in program.entry_params if arrays[v].kind == "output"]
        self._out_perms = [_non_identity(layout_perm(graph[_source(v)].type))
                           for v in self._output_values]
        self._results = program.results
        structure = graph.output_structure  # a bare output: return its tensor directly
        self._single = self._output_values.index(self._results[structure]) \
            if isinstance(structure, str) else None
        if os.environ.get("CUVIL_TRACE"):  # time every call (the normal entry is untimed)
            from cuvil.runtime.profile import trace_every_call

            trace_every_call(self, os.environ["CUVIL_TRACE"])

    # -- calling -----------------------------------------------------------------------------
    def __call__(self, *inputs: Any) -> Any:
        last = self._last
        if last is not None and _calling.__dict__.get("threads") == self.threads:
            arrays = _same_plain_arrays(inputs, last[0])
            if arrays is not None:  # the last call's shapes, plain tensors: 1-1.5 us less
                with self._lock:
                    outs = last[1].output_arrays()
                    self._entry(*arrays, *last[2], *outs, *last[3])
                return self._results_of(outs)
        if len(inputs) != len(self._params):
            names = ", ".join(n for n, _ in self._params)
            raise CuvilError(f"expected {len(self._params)} input(s) ({names}), "
                             f"got {len(inputs)}")
        arrays = [self._array(x, i) for i, x in enumerate(inputs)]
        key = tuple([(a.shape, a.dtype) for a in arrays])
        plan = self._plans.get(key)
        if plan is None:
            plan = self._new_plan(key, arrays)
        if getattr(_calling, "threads", None) != self.threads:
            numba.set_num_threads(self.threads)  # thread-local in Numba; costs 2.6 us to read
            _calling.threads = self.threads
        with self._lock:
            outs = plan.output_arrays()
            self._entry(*arrays, *self._consts, *plan.buffers, *outs, *plan.symbols,
                        self.threads, plan.fallbacks)
        if not any(self._in_perms):
            self._last = (key, plan, (*self._consts, *plan.buffers),
                          (*plan.symbols, self.threads, plan.fallbacks))
        return self._results_of(outs)

    def _results_of(self, outs: list[np.ndarray]) -> Any:
        if self._single is not None and self._out_perms[self._single] is None:
            return torch.from_numpy(outs[self._single])
        tensors = [torch.from_numpy(o) if p is None else logical_view(o, p)
                   for o, p in zip(outs, self._out_perms, strict=True)]
        if self._single is not None:
            return tensors[self._single]
        by_value = dict(zip(self._output_values, tensors, strict=True))
        return self.graph.rebuild_outputs(
            {name: by_value[value] for name, value in self._results.items()})

    def _array(self, x: Any, i: int) -> np.ndarray:
        try:
            a = x.numpy()  # a CPU tensor without grad: the common case, checked by torch
        except (AttributeError, RuntimeError, TypeError):
            a = self._unusual_input(x, i)
        if self._in_perms[i] is not None and a.ndim == len(self._in_perms[i]):
            a = a.transpose(self._in_perms[i])
        return a if a.flags.c_contiguous else np.ascontiguousarray(a)

    def _unusual_input(self, x: Any, i: int) -> np.ndarray:
        name = self._params[i][0]
        if isinstance(x, torch.Tensor):
            if x.device.type != "cpu":
                raise CuvilError(f"input {name!r}: expected a CPU tensor, got one on {x.device}")
            if x.requires_grad:
                warnings.warn(f"input {name!r} requires grad, but a Cuvil compiled model does "
                              "not track autograd: its outputs have no grad_fn (train with "
                              "the torch model)", UserWarning, stacklevel=4)
            return x.detach().numpy()
        if isinstance(x, np.ndarray | np.generic):
            return np.asarray(x)
        raise CuvilError(f"input {name!r}: expected a torch tensor or numpy array, "
                         f"got {type(x).__name__}")

    def _new_plan(self, key: tuple, arrays: list[np.ndarray]) -> _EnvPlan:
        dtypes = []
        for (name, _), a in zip(self._params, arrays, strict=True):
            if a.dtype not in _DTYPES:
                raise CuvilError(f"input {name!r}: unsupported dtype {a.dtype}")
            dtypes.append(_DTYPES[a.dtype])
        shapes = [a.shape if p is None else _logical_shape(a.shape, p)
                  for a, p in zip(arrays, self._in_perms, strict=True)]
        env = bind_symbols(self._params, shapes, dtypes)
        missing = [s for s in self._program.symbols if s not in env]
        if missing:
            raise CuvilError(f"dims {', '.join(missing)} are not set by any input shape")
        views = self._plan.allocate(env, self.threads)
        arrays_info = self._program.arrays
        outputs = [(tuple(eval_dim(d, env) for d in arrays_info[v].shape),
                    arrays_info[v].dtype.numpy) for v in self._output_values]
        fallbacks = [make_fallback(self.graph, node, env) for node in self._program.fallbacks]
        plan = _EnvPlan(env, [views[v] for v in self._buffer_values], outputs,
                        tuple(env[s] for s in self._program.symbols), fallbacks)
        self._plans[key] = plan
        while len(self._plans) > MAX_PLANS:
            self._plans.popitem(last=False)
        return plan

    # -- inspection --------------------------------------------------------------------------
    def profile(self, inputs: Any, runs: int = 10, *, warmup: int = 1, trace=None):
        """Call with `inputs` (a tuple, or one tensor) `warmup` times, then `runs` times with
        every kernel, copy and fallback timed: a `cuvil.runtime.profile.Profile` (print it
        for the summary table; `.outputs` are the last call's results). `trace` writes the
        Chrome trace, with the compile's pass timings when `compile(trace=...)` was on."""
        from cuvil.runtime.profile import profile

        return profile(self, inputs, runs, warmup=warmup, trace=trace)

    def memory_bytes(self, **env: int) -> int:
        """Bytes of planned intermediates for the given sizes of the symbolic dims."""
        return self._plan.nbytes(env, self.threads)

    def __repr__(self) -> str:
        return (f"<CompiledGraph {self.graph.name}: {len(self.report.kernels)} kernels, "
                f"{len(self.report.fallbacks)} fallbacks, target {self.report.target}>")


def _same_plain_arrays(inputs: tuple, key: tuple) -> list[np.ndarray] | None:
    """The inputs as arrays if each is a contiguous CPU tensor (or array) of the shape and
    dtype in `key`, else None (the general path checks and converts)."""
    if len(inputs) != len(key):
        return None
    arrays = []
    for x, (shape, dtype) in zip(inputs, key, strict=True):
        try:
            a = x.numpy() if isinstance(x, torch.Tensor) else None
        except (RuntimeError, TypeError):  # grad, another device: the general path says so
            return None
        if a is None or a.shape != shape or a.dtype != dtype or not a.flags.c_contiguous:
            return None
        arrays.append(a)
    return arrays


def _non_identity(perm: tuple[int, ...]) -> tuple[int, ...] | None:
    return None if perm == tuple(range(len(perm))) else perm


def _source(value: str) -> str:
    return value[:-len("__out")] if value.endswith("__out") else value


def _logical_shape(shape: tuple[int, ...], perm: tuple[int, ...]) -> tuple[int, ...]:
    if len(shape) != len(perm):
        return shape
    logical = [0] * len(perm)
    for p, d in enumerate(perm):
        logical[d] = shape[p]
    return tuple(logical)

