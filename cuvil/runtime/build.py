"""`build_program`: a `Lowering` (runtime/lowering.py) -> its Numba modules -> `CompiledGraph`.

    compiled = build_program(lower(graph, target="cpu"))   # or compile_graph(graph, ...)

Lowering (`cuvil.lower.compile.generate`) inlines composite ops, makes layouts explicit,
partitions into groups and runs each group's template; this module writes and imports each
kernel's own module (shared by every graph that generates the same kernel) and the graph's
entry module, then compiles every kernel eagerly for the exact argument types it will get:
a kernel already compiled in this process costs nothing, one compiled by an earlier process
is loaded from Numba's cache. A group whose kernel Numba rejects is split into its nodes,
and a node runs through torch (reported), or with `fallback=False` is a compile-time error
naming op, shape and source line. The result carries the memory plan, the thread count and
the report.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import numba
import numpy as np
import sympy
from numba.core import types as nbtypes

from cuvil import gc_pause
from cuvil.ir import devices
from cuvil.ir.graph import Graph
from cuvil.ir.torch_template import TorchCall
from cuvil.ir.types import SYMBOLIC_DIM_SIZE, format_dim
from cuvil.lower.codegen import KERNEL, Program, entry_module, target_of
from cuvil.lower.compile import fallback_report
from cuvil.lower.context import LowerContext
from cuvil.lower.devices import Targets
from cuvil.lower.physical import layout_perm, storage
from cuvil.lower.provenance import describe_group
from cuvil.lower.report import CompileReport, KernelReport
from cuvil.lower.spec import ONE_THREAD, THREADS
from cuvil.lower.steps import step_reports
from cuvil.runtime import compile_pool, derived
from cuvil.runtime.calling import (
    Array,
    CallSpec,
    Param,
    TorchFallback,
    fallback_groups,
)
from cuvil.runtime.compiled import CompiledGraph
from cuvil.runtime.lowering import Lowering, lower
from cuvil.runtime.module_cache import load_module
from cuvil.runtime.plan import Buffer, MemoryPlan
from cuvil.runtime.threads import active_layer

log = logging.getLogger("cuvil")


def compile_graph(graph: Graph, *, target="cpu", fallback: bool = True,
                  threads: int | None = None, cache_dir=None,
                  fuse_elementwise: bool = True, fallback_policy: str = "cpu",
                  sizes: dict[str, int] | None = None) -> CompiledGraph:
    """`build_program(lower(graph, ...))`: `graph` lowered for `target` (`runtime/lowering.py`)
    and compiled; see the module docstring."""
    return build_program(lower(graph, target=target, fallback=fallback, threads=threads,
                       fuse_elementwise=fuse_elementwise, fallback_policy=fallback_policy,
                       sizes=sizes), cache_dir)


def build_program(lowering: Lowering, cache_dir=None) -> CompiledGraph:
    """The callable of `lowering`'s program: its modules imported, every kernel compiled.

    Numba may reject a kernel the templates generated (a typing or lowering error they did
    not foresee). That is no compile error: the rejected kernel's groups are generated
    again apart (`Lowering.split`: a fused group as its nodes, a lone node through its
    fallback) and the program is built again. Each round forces at least one more node
    apart, so there are at most as many rounds as nodes."""
    for _ in range(len(lowering.prepared) + 1):
        module, path, paths = _load(lowering.program, cache_dir)
        aside = _compile_cold_aside(module, lowering.program, lowering.ctx, paths,
                                    lowering.targets)
        kernels, failed = _compile(module, lowering.program, lowering.ctx, aside)
        if not failed:
            break
        lowering = lowering.split(failed)
    return _compiled(lowering, module.entry, kernels, path, paths)


def _compiled(lowering: Lowering, entry, kernels, path: Path, paths) -> CompiledGraph:
    """The callable of a built program: call spec, constants, memory plan and report."""
    program, ctx, tgt = lowering.program, lowering.ctx, lowering.targets
    report = _report(",".join(tgt.names), program, ctx, lowering.groups, kernels,
                     lowering.threads, lowering.lower_s, path)
    for k in report.kernels:
        k.module = str(paths[k.name])
    plan = MemoryPlan(_buffers(program))
    _describe(report, lowering.graph, program, ctx, tgt, plan, lowering.threads,
              lowering.sizes)
    consts = constants_of(program, ctx)
    report.compile_s = time.perf_counter() - lowering.started
    return CompiledGraph(call_spec(lowering.prepared, program, plan), entry, consts, report,
                         lowering.threads, graph=lowering.prepared, program=program,
                         lowering=ctx)


def constants_of(program: Program, ctx) -> list[np.ndarray]:
    """The arrays of the entry's constant parameters, in its order."""
    done: dict = {}
    return [_const(program, ctx, v, done) for v in program.entry_params
            if program.arrays[v].kind == "const"]


def _describe(report: CompileReport, graph: Graph, program: Program, ctx, tgt: Targets,
              plan: MemoryPlan, n_threads: int, sizes: dict[str, int]) -> None:
    """The report's placement, steps and memory figures (intermediates sized with each
    symbolic dim at its size in `sizes`, else at SYMBOLIC_DIM_SIZE, said as assumed)."""
    report.placement, report.uploads = placement(program, tgt), len(program.uploads)
    report.steps, report.graph = step_reports(program, ctx, graph), graph
    env = {s: sizes.get(s, SYMBOLIC_DIM_SIZE) for s in sorted(program.symbols)}
    report.memory_slots, report.memory_env = plan.slots, env
    report.memory_assumed = [s for s in env if s not in sizes]
    report.memory_bytes = plan.nbytes(env, n_threads)
    report.naive_bytes = plan.naive_nbytes(env, n_threads)
    report.optimizer = graph.report
    report.writes = [f"the call writes input {x}, as the model does" for x in graph.mutations]


def call_spec(g: Graph, program: Program, plan: MemoryPlan) -> CallSpec:
    """How `program`'s entry is called, as plain data (`runtime/calling.py`)."""
    def dims(shape) -> tuple:
        return tuple(d if isinstance(d, int) or d == "threads" else format_dim(d)
                     for d in shape)

    def perm(t) -> tuple[int, ...] | None:
        p = layout_perm(t)
        return None if p == tuple(range(len(p))) else p

    params = tuple(Param(n, dims(g[n].type.shape), g[n].type.dtype.value, perm(g[n].type))
                   for n in g.inputs)
    kinds = {v: program.arrays[v] for v in program.entry_params}
    buffers = tuple(Array(b.value, dims(b.shape), storage(b.dtype).name, plan.slot_of[b.value])
                    for b in plan.buffers)
    outputs = tuple(Array(v, dims(a.shape), storage(a.dtype).name,
                          perm=perm(g[v.removesuffix("__out")].type))
                    for v, a in kinds.items() if a.kind == "output")
    slots = tuple((storage(dt).name, dev) for dt, dev in zip(plan.slot_dtype, plan.slot_device,
                                                     strict=True))
    return CallSpec(g.name, params, buffers, outputs, slots, tuple(program.symbols),
                    dict(program.results), g.output_structure,
                    tuple(n.name for n in program.fallbacks), g.output_tree is not None,
                    None if g.output_tree is None else g.output_tree.text(),
                    _torch_fallbacks(g, program.fallbacks),
                    tuple((d, least, most) for d, (least, most) in g.dim_ranges.items()),
                    tuple((g.inputs.index(x), program.results[v]) for x, v in g.mutations.items()))


def _torch_fallbacks(g: Graph, nodes: list) -> tuple[TorchFallback | None, ...]:
    """Each fallback's plain call (`_torch_fallback`), with the group of fallbacks that
    are results of one call (`calling.fallback_groups`)."""
    calls = [_torch_fallback(g, n) for n in nodes]
    groups = fallback_groups([(None if c is None else c.call, tuple(n.inputs))
                              for c, n in zip(calls, nodes, strict=True)])
    return tuple(c if c is None or not group else replace(c, group=group)
                 for c, group in zip(calls, groups, strict=True))


def _torch_fallback(g: Graph, node) -> TorchFallback | None:
    """A `torch_op` fallback on the CPU as plain data (None for any other fallback)."""
    values = [g[v].type for v in node.inputs] + [node.type]
    if node.op != "torch_op" or not all(devices.on_host(t.device) for t in values):
        return None
    call = TorchCall.of(node.attrs, lambda d: format_dim(d) if isinstance(d, sympy.Expr)
                        else None)
    return None if call is None else TorchFallback(
        call, tuple(layout_perm(g[v].type) for v in node.inputs), layout_perm(node.type))


def _const(program: Program, ctx: LowerContext, value: str, done: dict):
    """A constant's array (computed here when lowering declared it, `derived`); a constant
    moved to the GPU is copied there once, here."""
    if value in ctx.derived:
        return derived.compute(ctx, value, done)
    if value not in program.uploads:
        return ctx.const_array(value)
    upload = devices.device(program.arrays[value].device).upload
    return upload(ctx.const_array(program.uploads[value]))


def _load(program: Program, cache_dir) -> tuple[ModuleType, Path, dict[str, Path]]:
    """Import each kernel's module (named by its text, so shared by graphs), then the entry
    module, which imports the kernels under the graph's names; kernel name -> module path."""
    names, paths = {}, {}
    for kernel in program.kernels:
        module, paths[kernel.name] = load_module(kernel.module, cache_dir)
        names[kernel.name] = module.__name__
    entry, path = load_module(entry_module(program, names), cache_dir)
    return entry, path, paths


def _nb_type(program: Program, ctx: LowerContext, value: str):
    if value in (THREADS, ONE_THREAD) or value.startswith("#sym:"):  # sizes: integers
        return nbtypes.int64
    if value in program.arrays:
        a = program.arrays[value]
        return nbtypes.Array(numba.from_dtype(storage(a.dtype)), len(a.shape), "C")
    t = ctx.type(value)
    return nbtypes.Array(numba.from_dtype(storage(t.dtype)), t.rank, "C")


def _signatures(program: Program, ctx: LowerContext, kernel) -> list[tuple]:
    return list(dict.fromkeys(tuple(_nb_type(program, ctx, a) for a in s.args)
                              for s in program.steps if s.kernel == kernel.name))


def _compile_cold_aside(module, program: Program, ctx: LowerContext, paths,
                        tgt: Targets) -> dict:
    """With two or more kernels to compile from scratch, compile them side by side in
    worker processes (`compile_pool`); `_compile` then loads them from Numba's cache.
    Returns kernel name -> its share of that compile's wall time, for the kernels compiled
    there (the others are left to `_compile`)."""
    jobs = []
    for kernel in program.kernels:
        fn = getattr(module, kernel.name, None)
        if kernel.spec.python or fn is None:
            continue
        sigs = _signatures(program, ctx, kernel)
        if compile_pool.is_cold(fn, sigs):
            job = compile_pool.Job(str(paths[kernel.name]), KERNEL,
                                   tuple(compile_pool.encode(s) for s in sigs),
                                   4.0 if kernel.spec.parallel else 1.0,
                                   tuple(target_of(kernel.spec, tgt.primary).helpers_called(
                                       kernel.module).items()))
            jobs.append((job, fn))
    if len(jobs) < 2:
        return {}
    log.info("cuvil: compiling %d kernels new to this cache with Numba, in worker processes",
             len(jobs))
    t0 = time.perf_counter()
    with gc_pause.resumed():  # Numba's compiler makes garbage at scale
        done = compile_pool.compile_cold(jobs)
    if not done.jobs:
        return {}
    share = (time.perf_counter() - t0) / len(done.jobs)
    names = {str(paths[k.name]): k.name for k in program.kernels}
    return {names[job.path]: share for job in done.jobs}


def _compile(module, program: Program, ctx: LowerContext, aside: dict):
    """Compile every kernel for the argument types of its calls; time each kernel. A kernel
    is `cached` when nothing was compiled: every signature was loaded from Numba's cache or
    already compiled in this process (another graph, or another layer, shares it), and not
    compiled for this call by `compile_pool` (`aside`: its share of that time counts)."""
    reports, failed = [], []
    for kernel in program.kernels:
        if kernel.spec.python:
            reports.append((kernel, 0.0, None))
            continue
        fn = getattr(module, kernel.name)
        sigs = _signatures(program, ctx, kernel)
        done = sum(sig in fn.overloads for sig in sigs)
        hits = sum(fn.stats.cache_hits.values())
        t0 = time.perf_counter()
        try:
            with gc_pause.resumed() if done < len(sigs) else contextlib.nullcontext():
                for sig in sigs:  # loaded already (`is_cold`), or compiled here
                    fn.compile(sig)
        except Exception as e:  # Numba reports typing and lowering errors many ways
            reason = f"Numba rejected kernel {kernel.name}: {str(e).splitlines()[0]}"
            failed += [(group, reason) for group in kernel.groups]
            continue
        cached = done + sum(fn.stats.cache_hits.values()) - hits == len(sigs)
        seconds = time.perf_counter() - t0 + aside.get(kernel.name, 0.0)
        reports.append((kernel, seconds, cached and kernel.name not in aside))
    return reports, failed


def _buffers(program: Program) -> list[Buffer]:
    """Planned values with the step that writes them and the last step that reads them."""
    first, last = {}, {}
    for i, step in enumerate(program.steps):
        for v in step.args[:-1]:
            last[program.aliases.get(v, v)] = i
        out = step.args[-1]
        first.setdefault(out, i)
        last[out] = max(last.get(out, i), i)
    buffers = []
    for value in program.entry_params:
        a = program.arrays[value]
        if a.kind in ("buffer", "scratch"):
            i = first.get(value, 0)
            for s_i, step in enumerate(program.steps):
                if value in step.args:
                    i = min(i, s_i)
            buffers.append(Buffer(value, a.dtype, a.shape, i, max(last.get(value, i), i),
                                  a.device))
    return buffers


def placement(program: Program, targets: Targets) -> dict[str, str]:
    """Kernel name -> the target that runs it (what the report's placement lists)."""
    primary = targets.primary.name
    return {k.name: k.spec.target or primary for k in program.kernels}


def _report(target, program, ctx, groups, kernels, threads, lower_s, path) -> CompileReport:
    report = CompileReport(target, threads=threads, threading_layer=active_layer(),
                           lower_s=lower_s, module_path=str(path))
    for kernel, seconds, cached in kernels:
        nodes = [line for grp in kernel.groups for line in describe_group(grp, ctx)]
        report.kernels.append(KernelReport(kernel.name, kernel.spec.template, nodes, seconds,
                                           bool(cached), kernel.spec.parallel,
                                           jit=not kernel.spec.python, note=kernel.spec.note))
    report.fallbacks = [fallback_report(ctx.graph, g) for g in groups
                        if g.template == "fallback"]
    for grp in groups:
        if len(grp.fused) > 1:
            report.fused.append(f"{' + '.join(ctx.graph[n].op for n in grp.fused)} "
                                f"({', '.join(grp.fused)}) -> one {grp.template} kernel")
    lowered = {grp.instance for grp in groups if grp.instance}
    for name, inst in ctx.instances.items():
        if name not in lowered:
            report.composed.append(f"{name} = {inst.node.op}"
                                   + (f" at {inst.node.source}" if inst.node.source else ""))
    return report

