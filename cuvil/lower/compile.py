"""Lowering a graph to the text of a kernel module: `generate` and `lower_to_source`.

Stages: inline composite ops, make layouts explicit, partition into groups, run each
group's template, build the module text. A group a template rejects is split into its
nodes; a node nothing can lower runs through torch (reported), or with `fallback=False` is
a compile-time error naming op, shape and source line. Compiling the module and building
the callable is `cuvil.runtime.build_program` (of `cuvil.runtime.lower`'s `Lowering`).
"""

from __future__ import annotations

from cuvil.errors import CuvilError
from cuvil.ir.devices import HOST, device_target
from cuvil.ir.graph import Graph
from cuvil.lower.codegen import ModuleBuilder, Program
from cuvil.lower.context import LowerContext
from cuvil.lower.devices import Targets, device_kind, place_groups
from cuvil.lower.group import (
    Group,
    classify,
    normalize_layouts,
    partition,
    private_view_chains,
)
from cuvil.lower.inline import inline_composites
from cuvil.lower.report import FallbackReport
from cuvil.lower.spec import ONE_THREAD, THREADS, Unsupported
from cuvil.lower.target import get_target


def lower_to_source(graph: Graph, *, target="cpu", threads: int = 2,
                    fuse_elementwise: bool = True) -> str:
    """The module `compile_graph` would generate, without compiling it."""
    g, instances = prepare(graph)
    program, _, _ = generate(g, instances, Targets(target), threads, fuse_elementwise, {},
                             True)
    return program.text


def prepare(graph: Graph):
    """The graph lowering works on: dead nodes pruned, composites inlined, layouts explicit."""
    pruned = graph.prune()
    pruned.report = graph.report
    g, instances = inline_composites(pruned)
    g.import_report, g.output_tree = graph.import_report, graph.output_tree
    g.dim_ranges = graph.dim_ranges
    return private_view_chains(normalize_layouts(g)), instances


def generate(g: Graph, instances, targets, threads: int, fuse: bool, forced: dict[str, str],
             fallback: bool) -> tuple[Program, LowerContext, list[Group]]:
    """Partition, place groups on their devices' targets, run the templates, build the
    module text. `targets`: a `Targets`, or what it is built from."""
    targets = targets if isinstance(targets, Targets) else Targets(targets)
    ctx = LowerContext(g, threads, instances=instances)
    host = get_target(device_target()[HOST])  # partitioning groups for its templates
    groups = place_groups(partition(g, instances, fuse, host.attention_matcher()), g)
    host_attention = host.generator("attention")
    groups = host.regroup(groups, g, lambda group: targets.of(group, g).generator(
        "attention") is host_attention)
    groups, specs = _lower_groups(_apply_forced(groups, g, forced), ctx, targets)
    if not fallback:
        _refuse_fallbacks(groups, g, targets.primary.name)
    _device_fallbacks(groups, g, targets)
    builder = ModuleBuilder(ctx, targets.primary, groups, specs, g.outputs)
    return builder.build(), ctx, groups


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
            kind, why = _classify(g, n)
            out.append(Group(kind, [n], reason=why) if reason == "split" else
                       Group("fallback", [n], reason=reason))
    return out


def _lower_groups(groups: list[Group], ctx: LowerContext, targets: Targets
                  ) -> tuple[list[Group], dict]:
    """Run each group's template on its device's target; a rejected group is split, a
    rejected node falls back."""
    done, specs = [], {}
    work = list(reversed(groups))
    while work:
        group = work.pop()
        if group.template in ("alias", "fallback"):
            done.append(group)
            continue
        tgt = targets.of(group, ctx.graph)
        gen = tgt.generator(group.template)
        try:
            if gen is None:
                raise Unsupported(f"target {tgt.name} has no {group.template} kernels")
            spec = specs[id(group)] = gen(group, ctx)
            spec.target = tgt.name
            if spec.library and not tgt.threaded:  # a driver's threads, on a serial target
                spec.args = [ONE_THREAD if a == THREADS else a for a in spec.args]
            done.append(group)
        except Unsupported as e:
            parts = [n for n in group.nodes if ctx.graph[n].op != "scalar"]
            if len(parts) > 1:
                work.extend(reversed(_split(group, parts, ctx.graph)))
            else:
                done.append(Group("fallback", parts, reason=str(e)))
    order = {n: i for i, n in enumerate(ctx.graph.nodes)}
    done.sort(key=lambda grp: order[grp.output])
    return done, specs


def _split(group: Group, parts: list[str], g: Graph) -> list[Group]:
    """A rejected group's parts: a convolution pooled in its epilogue loses only the pool
    (the convolution keeps its epilogue), an MLP its last layer (a head becomes a pair and
    a product, a pair two products); any other group becomes one group per node."""
    if group.template == "conv" and g[parts[-1]].op == "max_pool2d" and len(parts) > 2:
        return [Group("conv", group.nodes[:group.nodes.index(parts[-1])]),
                Group(*_kind(g, parts[-1]))]
    if group.template == "mlp":  # its last layer apart, each keeping its epilogue
        at = [i for i, n in enumerate(group.nodes) if g[n].op == "matmul"]
        return [Group("mlp" if len(at) > 2 else "gemm", group.nodes[:at[-1]]),
                Group("gemm", group.nodes[at[-1]:])]
    return [Group(*_kind(g, n)) for n in parts]


def _kind(g: Graph, n: str) -> tuple[str, list[str]]:
    return _classify(g, n)[0], [n]


def _classify(g: Graph, n: str) -> tuple[str, str]:
    """(template, reason) of one node, for its device."""
    return classify(g[n], g) if g[n].type.device == HOST else device_kind(g[n])


def _device_fallbacks(groups: list[Group], g: Graph, targets: Targets) -> None:
    """Fallbacks of nodes on a device run on the CPU, their operands copied there and back
    (`fallback_policy="cpu"`), or are a one-line error naming each op and its source line
    (`"error"`)."""
    moved = [grp for grp in groups if grp.template == "fallback"
             and g[grp.output].type.device != HOST]
    if moved and targets.policy == "error":
        lines = [str(fallback_report(g, grp)) for grp in moved]
        raise CuvilError(f"fallback_policy='error': {len(moved)} node(s) have no kernel on "
                         f"their device: " + "; ".join(lines)
                         + " (fallback_policy='cpu' runs them on the CPU, with copies)")
    for grp in moved:
        grp.reason = f"{grp.reason or 'no kernel'}; runs on the CPU, copies in and out"


def _refuse_fallbacks(groups: list[Group], g: Graph, target: str) -> None:
    bad = [grp for grp in groups if grp.template == "fallback"]
    if bad:
        lines = [fallback_report(g, grp) for grp in bad]
        raise CuvilError(f"target {target} cannot lower {len(bad)} node(s) and fallback=False: "
                         + "; ".join(str(f) for f in lines))


def fallback_report(g: Graph, group: Group) -> FallbackReport:
    node = g[group.output]
    shape = str(node.type)
    op = f"torch_op {node.attrs.get('target')}" if node.op == "torch_op" else node.op
    placed = "" if node.type.device == HOST else node.type.device
    return FallbackReport(node.name, op, shape, node.source, group.reason or "no kernel",
                          placed)
