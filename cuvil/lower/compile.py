"""`compile_graph`: an (optimized) Cuvil graph -> generated Numba module -> `CompiledGraph`.

Stages: inline composite ops, make layouts explicit, partition into groups, run each
group's template, write and import the module, then compile every kernel eagerly for the
exact argument types it will get. A group a template rejects is split into its nodes; a
node nothing can lower, or whose kernel Numba rejects, runs through torch (reported), or
with `fallback=False` is a compile-time error naming op, shape and source line.
"""

from __future__ import annotations

import time

import numba
from numba.core import types as nbtypes

from cuvil.errors import CuvilError
from cuvil.ir.graph import Graph
from cuvil.lower.codegen import ModuleBuilder, Program, describe_group
from cuvil.lower.context import LowerContext
from cuvil.lower.group import (
    Group,
    classify,
    normalize_layouts,
    partition,
    private_view_chains,
)
from cuvil.lower.inline import inline_composites
from cuvil.lower.steps import step_reports
from cuvil.lower.target import get_target
from cuvil.lower.templates.spec import THREADS, Unsupported
from cuvil.runtime.blas import single_threaded_blas
from cuvil.runtime.compiled import CompiledGraph
from cuvil.runtime.module_cache import load_module
from cuvil.runtime.plan import REFERENCE_SIZE, Buffer, MemoryPlan
from cuvil.runtime.report import CompileReport, FallbackReport, KernelReport
from cuvil.runtime.threads import active_layer, choose_layer, thread_count


def compile_graph(graph: Graph, *, target="cpu", fallback: bool = True,
                  threads: int | None = None, cache_dir=None,
                  fuse_elementwise: bool = True) -> CompiledGraph:
    """Lower `graph` to kernels for `target`; see the module docstring."""
    start = time.perf_counter()
    tgt = get_target(target)
    choose_layer()
    single_threaded_blas()
    n_threads = thread_count(threads)
    g, instances = prepare(graph)
    forced: dict[str, str] = {}  # node -> "split" or a fallback reason
    for _ in range(len(g) + 1):
        program, ctx, groups = generate(g, instances, tgt, n_threads, fuse_elementwise,
                                        forced, fallback)
        lower_s = time.perf_counter() - start
        module, path = load_module(program.text, cache_dir)
        kernels, failed = _compile(module, program, ctx)
        if not failed:
            break
        for group, reason in failed:
            for n in group.nodes:
                forced[n] = "split" if len(group.nodes) > 1 else reason
    report = _report(tgt.name, program, ctx, groups, kernels, n_threads, lower_s, path)
    report.steps, report.graph = step_reports(program, ctx, graph), graph
    plan = MemoryPlan(_buffers(program))
    env = {s: REFERENCE_SIZE for s in program.symbols}
    report.memory_slots, report.memory_env = plan.slots, env
    report.memory_bytes = plan.nbytes(env, n_threads)
    report.naive_bytes = plan.naive_nbytes(env, n_threads)
    report.optimizer = graph.report
    consts = [ctx.const_array(v) for v in program.entry_params
              if program.arrays[v].kind == "const"]
    report.compile_s = time.perf_counter() - start
    return CompiledGraph(g, program, module.entry, consts, plan, report, n_threads)


def lower_to_source(graph: Graph, *, target="cpu", threads: int = 2,
                    fuse_elementwise: bool = True) -> str:
    """The module `compile_graph` would generate, without compiling it."""
    g, instances = prepare(graph)
    program, _, _ = generate(g, instances, get_target(target), threads, fuse_elementwise, {},
                             True)
    return program.text


def prepare(graph: Graph):
    """The graph lowering works on: dead nodes pruned, composites inlined, layouts explicit."""
    pruned = graph.prune()
    pruned.report = graph.report
    g, instances = inline_composites(pruned)
    g.import_report, g.output_tree = graph.import_report, graph.output_tree
    return private_view_chains(normalize_layouts(g)), instances


def generate(g: Graph, instances, tgt, threads: int, fuse: bool, forced: dict[str, str],
             fallback: bool) -> tuple[Program, LowerContext, list[Group]]:
    """Partition, run the templates, build the module text."""
    from cuvil.lower.templates.attention import match as attention_match

    ctx = LowerContext(g, threads, instances=instances)
    groups = partition(g, instances, fuse, attention_match)
    groups, specs = _lower_groups(_apply_forced(groups, g, forced), ctx, tgt)
    if not fallback:
        _refuse_fallbacks(groups, g, tgt.name)
    return ModuleBuilder(ctx, tgt, groups, specs, g.outputs).build(), ctx, groups


def _apply_forced(groups: list[Group], g: Graph, forced: dict[str, str]) -> list[Group]:
    out = []
    for group in groups:
        if not any(n in forced for n in group.nodes):
            out.append(group)
            continue
        for n in group.nodes:
            if g[n].op == "scalar":
                continue
            reason = forced.get(n, "split")
            kind, why = classify(g[n], g)
            out.append(Group(kind, [n], reason=why) if reason == "split" else
                       Group("fallback", [n], reason=reason))
    return out


def _lower_groups(groups: list[Group], ctx: LowerContext, tgt) -> tuple[list[Group], dict]:
    """Run each group's template; a rejected group is split, a rejected node falls back."""
    done, specs = [], {}
    work = list(reversed(groups))
    while work:
        group = work.pop()
        if group.template in ("alias", "fallback"):
            done.append(group)
            continue
        gen = tgt.generator(group.template)
        try:
            if gen is None:
                raise Unsupported(f"target {tgt.name} has no {group.template} kernels")
            specs[id(group)] = gen(group, ctx)
            done.append(group)
        except Unsupported as e:
            parts = [n for n in group.nodes if ctx.graph[n].op != "scalar"]
            if len(parts) > 1:
                singles = [Group(*_kind(ctx.graph, n)) for n in parts]
                work.extend(reversed(singles))
            else:
                done.append(Group("fallback", parts, reason=str(e)))
    order = {n: i for i, n in enumerate(ctx.graph.nodes)}
    done.sort(key=lambda grp: order[grp.output])
    return done, specs


def _kind(g: Graph, n: str) -> tuple[str, list[str]]:
    return classify(g[n], g)[0], [n]


def _refuse_fallbacks(groups: list[Group], g: Graph, target: str) -> None:
    bad = [grp for grp in groups if grp.template == "fallback"]
    if bad:
        lines = [_fallback_report(g, grp) for grp in bad]
        raise CuvilError(f"target {target} cannot lower {len(bad)} node(s) and fallback=False: "
                         + "; ".join(str(f) for f in lines))


def _fallback_report(g: Graph, group: Group) -> FallbackReport:
    node = g[group.output]
    shape = str(node.type)
    op = f"torch_op {node.attrs.get('target')}" if node.op == "torch_op" else node.op
    return FallbackReport(node.name, op, shape, node.source, group.reason or "no kernel")


def _nb_type(program: Program, ctx: LowerContext, value: str):
    if value == THREADS:
        return nbtypes.int64
    if value in program.arrays:
        a = program.arrays[value]
        return nbtypes.Array(numba.from_dtype(a.dtype.numpy), len(a.shape), "C")
    t = ctx.type(value)
    return nbtypes.Array(numba.from_dtype(t.dtype.numpy), t.rank, "C")


def _compile(module, program: Program, ctx: LowerContext):
    """Compile every kernel for the argument types of its calls; time each kernel."""
    reports, failed = [], []
    for kernel in program.kernels:
        if kernel.spec.python:
            reports.append((kernel, 0.0, None))
            continue
        fn = getattr(module, kernel.name)
        sigs = dict.fromkeys(tuple(_nb_type(program, ctx, a) for a in s.args)
                             for s in program.steps if s.kernel == kernel.name)
        hits = sum(fn.stats.cache_hits.values())
        t0 = time.perf_counter()
        try:
            for sig in sigs:
                fn.compile(sig)
        except Exception as e:  # Numba reports typing and lowering errors many ways
            reason = f"Numba rejected kernel {kernel.name}: {str(e).splitlines()[0]}"
            failed += [(group, reason) for group in kernel.groups]
            continue
        cached = sum(fn.stats.cache_hits.values()) - hits == len(sigs)
        reports.append((kernel, time.perf_counter() - t0, cached))
    if failed:
        return reports, failed
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
            buffers.append(Buffer(value, a.dtype, a.shape, i, max(last.get(value, i), i)))
    return buffers


def _report(target, program, ctx, groups, kernels, threads, lower_s, path) -> CompileReport:
    report = CompileReport(target, threads=threads, threading_layer=active_layer(),
                           lower_s=lower_s, module_path=str(path))
    for kernel, seconds, cached in kernels:
        nodes = [line for grp in kernel.groups for line in describe_group(grp, ctx)]
        report.kernels.append(KernelReport(kernel.name, kernel.spec.template, nodes, seconds,
                                           bool(cached), kernel.spec.parallel,
                                           jit=not kernel.spec.python))
    report.fallbacks = [_fallback_report(ctx.graph, g) for g in groups
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

