"""`CompiledGraph`: a lowered graph as a callable taking and returning torch tensors.

A call converts its inputs to numpy without copying, finds the buffers planned for these
input shapes (planned once per set of shapes, checked with a clear error on the first
call), takes a workspace (the planned buffers) and output arrays, and calls the generated
`entry` function once. Outputs are torch tensors over those arrays, or over the memory of a
torch fallback's result that `entry` returns in an output's place: they never alias a
buffer that a later call reuses.

Calls from several threads run at once. What they share is read-only: the entry, the
constants, the plans (`runtime/workspaces.ShapePlan`); each call runs on a workspace no
other running call holds, with output arrays of its own (`runtime/workspaces.py`), and
sets Numba's thread count for its own thread. The call never writes a caller's tensor or
a constant, except the inputs the model itself writes in place (`CallSpec.writes`);
`CUVIL_CHECK_WRITES=1` checks that on every call (`runtime/write_check.py`).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import threading
import warnings
from collections import OrderedDict
from typing import Any

import numba
import numpy as np
import torch

from cuvil.errors import CuvilError
from cuvil.ir.outputs import OutputTree
from cuvil.ir.structure import flatten, unflatten
from cuvil.lower.bf16 import from_tensor, to_tensor
from cuvil.lower.report import CompileReport
from cuvil.runtime.calling import DTYPE_NAMES, CallSpec, logical_view
from cuvil.runtime.fast_path import MISS, bind, calling
from cuvil.runtime.workspaces import ShapePlan

MAX_PLANS = 16  # sets of input shapes whose buffers a compiled graph keeps
CHECK_WRITES = os.environ.get("CUVIL_CHECK_WRITES", "") not in ("", "0")  # write_check.py


class CompiledGraph:
    """Call with torch tensors or numpy arrays; returns the graph's output structure.

    It runs on plain data (`spec`, the loaded `entry`, the constants' arrays). The graph
    and the program it was lowered from are for inspection (`graph`, `source`, `profile`):
    given, or loaded on first use by `details()`, a compile of the same model that has them
    (the program cache's hits, `cuvil/cache/programs.py`). A hit whose key vouches for the
    example inputs alone (`shapes`: a fake trace's, `frontend/fake_fingerprint.py`) becomes
    that compile on its first call with any other inputs."""

    def __init__(self, spec: CallSpec, entry, consts: list[np.ndarray], report: CompileReport,
                 threads: int, *, graph=None, program=None, details=None, shapes=None,
                 lowering=None):
        self.report = report
        self.threads = threads
        self.weights = None  # the model's tensors, for `load_state_dict` (`runtime.swap`)
        self._spec = spec
        self._entry = entry
        self._consts = consts
        self._graph, self._lowered, self._details = graph, program, details
        self._lowering = lowering  # the `LowerContext`: how each constant was arranged
        self._tree = None  # the model's own output containers, read on first use
        self._shapes = None if shapes is None else [
            (tuple(shape), str(dtype).removeprefix("torch.")) for shape, dtype in shapes]
        self._plans: OrderedDict[tuple, ShapePlan] = OrderedDict()
        self._fast = None  # `fast_path.bind`'s call for the last call's plan
        self._lock = threading.Lock()  # making a plan, widening: never around a call
        self._in_perms = [p.perm for p in spec.params]
        self._out_perms = [o.perm for o in spec.outputs]
        self._output_values = [o.value for o in spec.outputs]
        structure = spec.structure  # a bare output: return its tensor directly
        self._single = self._output_values.index(spec.results[structure]) \
            if isinstance(structure, str) else None
        self._bare = self._single if self._single is not None and \
            self._out_perms[self._single] is None else None  # returned as it is
        self._flat = _flat_order(spec, self._output_values)  # a tuple of outputs, in order
        if os.environ.get("CUVIL_TRACE"):  # time every call (the normal entry is untimed)
            from cuvil.runtime.profile import trace_every_call

            trace_every_call(self, os.environ["CUVIL_TRACE"])
        if CHECK_WRITES:  # every call checks it wrote no caller tensor and no constant
            from cuvil.runtime.write_check import check_writes

            check_writes(self)

    @property
    def graph(self):
        """The graph this was lowered from (optimized, then prepared for lowering)."""
        if self._graph is None:
            self._graph = self.detailed().graph
        return self._graph

    @property
    def _program(self):
        """The lowered program (`cuvil.lower.codegen.Program`): what a profile instruments."""
        if self._lowered is None:
            self._lowered = self.detailed()._program
        return self._lowered

    def detailed(self) -> CompiledGraph:
        """This, or (compiled once, on first use) the same model compiled with the graph
        and program that this one, rebuilt from the program cache, does not hold."""
        if self._details is None:  # compiled the slow way: it has them
            return self
        if not isinstance(self._details, CompiledGraph):
            self._details = self._details()
        return self._details

    @property
    def source(self) -> str:
        """The generated code, as one readable module."""
        return self._program.text

    # -- calling -----------------------------------------------------------------------------
    def __call__(self, *inputs: Any) -> Any:
        if self._fast is not None:
            result = self._fast(inputs)  # the last call's shapes, plain tensors: 1.3 us less
            if result is not MISS:
                return result
        params = self._spec.params
        if len(inputs) != len(params):
            names = ", ".join(p.name for p in params)
            raise CuvilError(f"expected {len(params)} input(s) ({names}), "
                             f"got {len(inputs)}")
        arrays = [self._array(x, i) for i, x in enumerate(inputs)]
        key = tuple([(a.shape, a.dtype) for a in arrays])
        plan = self._plans.get(key)
        if plan is None:
            if self._shapes is not None and not self._vouched(arrays):
                return self._widened()(*inputs)
            plan = self._new_plan(key, arrays)
        if getattr(calling, "threads", None) != self.threads:
            numba.set_num_threads(self.threads)  # thread-local in Numba; costs 2.6 us to read
            calling.threads = self.threads
        work = plan.take()  # buffers no other running call holds
        outs = work.output_arrays()
        outs = self._entry(*arrays, *work.pre, *outs, *plan.post) or outs  # `Program.returns`
        plan.give(work)
        if self._spec.writes:  # no bound fast path: it would skip the writes
            self._write_inputs(inputs, outs)
            return self._results_of(outs)
        if not any(self._in_perms):
            with self._lock:  # not a plan a weight swap (`swap_constants`) has retired
                if self._plans.get(key) is plan:
                    self._fast = self._bound(key, plan)
        return self._results_of(outs)

    def load_state_dict(self, state_dict: dict[str, torch.Tensor], strict: bool = True) -> None:
        """Run with the model's weights `state_dict` from the next call on, as a fresh
        compile of them would (`cuvil/runtime/swap.py`): the constants are computed again
        (folds, packing) and the kernels kept. A change of shape or dtype is refused."""
        from cuvil.runtime.swap import load_state

        load_state(self, state_dict, strict)

    def with_weights(self, state_dict: dict[str, torch.Tensor],
                     strict: bool = True) -> CompiledGraph:
        """This model with weights `state_dict`, this one unchanged: a version served beside
        others, the kernels shared and the constants its own."""
        twin = copy.copy(self)
        twin._plans, twin._fast, twin._lock = OrderedDict(), None, threading.Lock()
        twin.report = copy.copy(self.report)
        twin.weights = None if self.weights is None else dataclasses.replace(self.weights)
        twin.load_state_dict(state_dict, strict)
        return twin

    def swap_constants(self, consts: list[np.ndarray], graph, lowering, program) -> None:
        """Run on `consts` (of `graph`, as `lowering` arranged them) from the next call on;
        calls in flight finish on the old ones."""
        with self._lock:
            self._consts, self._graph, self._lowering = consts, graph, lowering
            self._lowered, self._details = program, None
            self._plans, self._fast = OrderedDict(), None

    def _bound(self, key: tuple, plan: ShapePlan):
        one = plan.fresh and self._bare is not None and len(plan.outputs) == 1
        return bind(self._entry, key, plan, self._results_of, self.threads,
                    plan.outputs[0] if one else None)

    def _write_inputs(self, inputs: tuple, outs: list[np.ndarray]) -> None:
        """Write into the caller's tensors what the model writes into them in place (into
        the tensor itself, whatever its strides, not the array the call converted)."""
        index = {o.value: i for i, o in enumerate(self._spec.outputs)}
        for position, value in self._spec.writes:
            i = index[value]
            new = to_tensor(outs[i]) if self._out_perms[i] is None else \
                logical_view(outs[i], self._out_perms[i])
            target = inputs[position]
            with torch.no_grad():
                if isinstance(target, np.ndarray):
                    target = torch.from_numpy(target)
                target.copy_(new)

    def use_entry(self, entry) -> None:
        """Call `entry` from now on (a profile's timed one)."""
        self._entry, self._fast = entry, None

    def _results_of(self, outs: list[np.ndarray]) -> Any:
        if self._bare is not None:
            return to_tensor(outs[self._bare])
        tensors = [to_tensor(o) if p is None else logical_view(o, p)
                   for o, p in zip(outs, self._out_perms, strict=True)]
        if self._single is not None:
            return tensors[self._single]
        if self._flat is not None:
            return tuple([tensors[i] for i in self._flat])
        by_value = dict(zip(self._output_values, tensors, strict=True))
        values = {name: by_value[value] for name, value in self._spec.results.items()}
        if self._spec.own_containers:  # the model's output tree rebuilds them
            if self._tree is None:
                self._tree = OutputTree(text=self._spec.output_tree) \
                    if self._spec.output_tree else self.graph.output_tree
            return self._tree.rebuild([values[n] for n in flatten(self._spec.structure)])
        return unflatten(self._spec.structure, values)

    def _array(self, x: Any, i: int) -> np.ndarray:
        try:
            a = x.numpy()  # a CPU tensor without grad: the common case, checked by torch
        except (AttributeError, RuntimeError, TypeError):
            a = self._unusual_input(x, i)
        if self._in_perms[i] is not None and a.ndim == len(self._in_perms[i]):
            a = a.transpose(self._in_perms[i])
        return a if a.flags.c_contiguous else np.ascontiguousarray(a)

    def _unusual_input(self, x: Any, i: int) -> np.ndarray:
        name = self._spec.params[i].name
        if isinstance(x, torch.Tensor):
            if not x.is_cpu:
                raise CuvilError(f"input {name!r}: expected a CPU tensor, got one on {x.device}")
            if x.requires_grad:
                warnings.warn(f"input {name!r} requires grad, but a Cuvil compiled model does "
                              "not track autograd: its outputs have no grad_fn (train with "
                              "the torch model)", UserWarning, stacklevel=4)
            return from_tensor(x.detach())
        if isinstance(x, np.ndarray | np.generic):
            return np.asarray(x)
        raise CuvilError(f"input {name!r}: expected a torch tensor or numpy array, "
                         f"got {type(x).__name__}")

    def _vouched(self, arrays: list[np.ndarray]) -> bool:
        """Whether these inputs have the shapes and dtypes the program's key vouches for."""
        got = [(_logical_shape(a.shape, p) if p else a.shape, a.dtype.name)
               for a, p in zip(arrays, self._in_perms, strict=True)]
        return got == self._shapes

    def _widened(self) -> CompiledGraph:
        """This, become the model compiled the usual way (`details()`: export, then the
        optimizer's and kernels' caches), which serves every shape the model does."""
        with self._lock:
            if self._shapes is not None:
                lock, wide, weights = self._lock, self.detailed(), self.weights
                vars(self).update(vars(wide))
                self._lock, self._fast, self.weights = lock, None, weights
        return self

    def _new_plan(self, key: tuple, arrays: list[np.ndarray]) -> ShapePlan:
        """The plan for these inputs' shapes, made by one thread while others wait."""
        with self._lock:
            plan = self._plans.get(key)
            if plan is None:
                plan = self._plans[key] = self._make_plan(arrays)
                while len(self._plans) > MAX_PLANS:
                    self._plans.popitem(last=False)
        return plan

    def _make_plan(self, arrays: list[np.ndarray]) -> ShapePlan:
        dtypes = []
        for p, a in zip(self._spec.params, arrays, strict=True):
            if a.dtype.name not in DTYPE_NAMES:
                raise CuvilError(f"input {p.name!r}: unsupported dtype {a.dtype}")
            dtypes.append(DTYPE_NAMES[a.dtype.name])
        shapes = [a.shape if p is None else _logical_shape(a.shape, p)
                  for a, p in zip(arrays, self._in_perms, strict=True)]
        env = self._spec.bind(shapes, dtypes)
        shared = {c.group: threading.local() for c in self._spec.torch_calls
                  if c is not None and c.group}  # a call several fallbacks share
        fallbacks = [self._fallback(i, env, shared) for i in range(len(self._spec.fallbacks))]
        return ShapePlan(self._spec, env, tuple(self._consts), self.threads, fallbacks)

    def _fallback(self, i: int, env: dict[str, int], shared: dict):
        """Fallback `i` for these sizes: from its plain call (sharing its group's results
        in `shared`), else from the graph."""
        calls = self._spec.torch_calls
        if i < len(calls) and calls[i] is not None:
            return calls[i].bound(env, shared.get(calls[i].group), i)
        from cuvil.runtime.fallback import make_fallback

        graph = self.graph
        return make_fallback(graph, graph[self._spec.fallbacks[i]], env)

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
        return sum(n * np.dtype(dtype).itemsize for n, (dtype, _) in
                   zip(self._spec.slot_sizes(env, self.threads), self._spec.slots, strict=True))

    def __repr__(self) -> str:
        return (f"<CompiledGraph {self._spec.name}: {len(self.report.kernels)} kernels, "
                f"{len(self.report.fallbacks)} fallbacks, target {self.report.target}>")


def _logical_shape(shape: tuple[int, ...], perm: tuple[int, ...]) -> tuple[int, ...]:
    if len(shape) != len(perm):
        return shape
    logical = [0] * len(perm)
    for p, d in enumerate(perm):
        logical[d] = shape[p]
    return tuple(logical)


def _flat_order(spec: CallSpec, output_values: list[str]) -> list[int] | None:
    """The outputs' positions, in order, where the model returns a flat tuple of them (no
    containers of its own, no nesting); else None."""
    structure = spec.structure
    if spec.own_containers or type(structure) is not tuple or \
            not all(isinstance(name, str) for name in structure):
        return None
    return [output_values.index(spec.results[name]) for name in structure]
