"""`graph_dump`: the optimized graph as Graphviz DOT, nodes coloured by measured latency.

    cuvil.graph_dump(model, "mlp.svg", example_inputs=inputs)     # or a compiled graph

Each op node is labelled with its op, and, when its time per call reaches
`latency_threshold_ms`, with that time: `linear_relu [2.3ms]`. Every timed node is filled
by band: under 0.05 ms green (#d4edda), 0.05-0.5 ms yellow (#fff3cd), over 0.5 ms red
(#f8d7da). A node's time is the sum of its steps' means (`cuvil.runtime.profile`); a node
fused into another's kernel is drawn dashed, its time counted there. Tooltips (hover in an
SVG) carry the node's definition, source line, the rules that produced it with their
`path:line`, and its kernels. Constants and scalars are left out of the drawing (the
tooltips name them). `.dot`/`.gv` files are written as text; `.svg` and `.png` are
rendered by Graphviz's `dot` program, which must be installed.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cuvil.atomic import write_bytes, write_text
from cuvil.errors import CuvilError
from cuvil.ir.graph import Graph, Node
from cuvil.ir.types import SYMBOLIC_DIM_SIZE

GREEN, YELLOW, RED = "#d4edda", "#fff3cd", "#f8d7da"  # < 0.05 ms, 0.05-0.5 ms, > 0.5 ms
TEXT_FORMATS = {".dot", ".gv"}
RENDERED_FORMATS = {".svg": "svg", ".png": "png"}
HIDDEN_OPS = {"const", "scalar"}


@dataclass
class Timings:
    """What a profile says about each optimized graph node."""

    runs: int
    latency_ms: dict[str, float] = field(default_factory=dict)  # node -> ms per call
    kernels: dict[str, list[str]] = field(default_factory=dict)  # node -> its steps
    fused_into: dict[str, str] = field(default_factory=dict)  # node -> node timed for it


def graph_dump(model_or_compiled: Any, output_path: str | Path = "graph.dot", *,
               include_latency: bool = True, latency_threshold_ms: float = 0.1,
               example_inputs: Any = None, runs: int = 10, **compile_options: Any) -> str:
    """Write the optimized graph of a model, `Graph` or compiled graph to `output_path`
    (.dot, .gv, .svg or .png); return the DOT text. With `include_latency`, the graph is
    compiled (unless it already is) and run `runs` times on `example_inputs` (made up from
    the input types, symbolic dims at 64, if not given)."""
    fmt = output_format(output_path)
    graph, compiled = _resolve(model_or_compiled, example_inputs, include_latency,
                               compile_options)
    if include_latency:
        return dump_profiled(compiled, output_path, example_inputs, runs=runs,
                             threshold_ms=latency_threshold_ms)[0]
    text = dot_text(graph, None, latency_threshold_ms)
    write_output(text, output_path, fmt)
    return text


def dump_profiled(compiled, output_path: str | Path, inputs: Any = None, *, runs: int = 10,
                  threshold_ms: float = 0.1, trace: str | Path | None = None):
    """Profile `compiled` on `inputs` (made up if None), write its graph coloured by the
    measured latency, and `trace` (Chrome trace) if given: (DOT text, the profile)."""
    fmt = output_format(output_path)
    if not inputs:
        inputs = made_up_inputs(compiled)
    prof = compiled.profile(inputs, runs=runs, trace=trace)
    text = dot_text(compiled.report.graph or compiled.graph, timings_of(prof), threshold_ms)
    write_output(text, output_path, fmt)
    return text, prof


def _resolve(model: Any, example_inputs: Any, compile_it: bool, options: dict[str, Any]):
    """(the optimized graph, a compiled graph or None) for what `graph_dump` was given."""
    from cuvil.runtime.compiled import CompiledGraph

    if isinstance(model, CompiledGraph):
        return (model.report.graph or model.graph), model
    inputs = _as_tuple(example_inputs)
    if isinstance(model, Graph) and model.report is not None:  # already optimized
        if not compile_it:
            return model, None
        from cuvil.runtime import compile_graph

        return model, compile_graph(model, **options)
    from cuvil import pipeline

    if not compile_it:
        return pipeline.optimize(model, inputs, **options), None
    compiled = pipeline.compile(model, inputs, **options)
    return (compiled.report.graph or compiled.graph), compiled


def _as_tuple(inputs: Any) -> tuple | None:
    if inputs is None:
        return None
    return tuple(inputs) if isinstance(inputs, tuple | list) else (inputs,)


def made_up_inputs(compiled) -> tuple:
    """Inputs of the compiled graph's types: normal floats, zero integers (valid indices),
    symbolic dims at `SYMBOLIC_DIM_SIZE`."""
    import torch

    from cuvil.ir.types import eval_dim

    made = []
    for name in compiled.graph.inputs:
        t = compiled.graph[name].type
        env = {str(s): SYMBOLIC_DIM_SIZE for d in t.shape if not isinstance(d, int)
               for s in d.free_symbols}
        shape = tuple(eval_dim(d, env) for d in t.shape)
        dtype = t.dtype.torch
        made.append(torch.randn(shape, dtype=dtype) if dtype.is_floating_point
                    else torch.zeros(shape, dtype=dtype))
    return tuple(made)


def timings_of(prof) -> Timings:
    """Per node: time per call, the steps that computed it, the node fused nodes count for."""
    timings = Timings(len(prof.calls), prof.node_latency_ms())
    for step, mean_us in zip(prof.steps, prof.step_means_us(), strict=True):
        if step.node:
            timings.kernels.setdefault(step.node, []).append(
                f"{step.name} [{step.template}] {mean_us:.1f} us")
        for node in step.nodes:
            if node != step.node and step.node:
                timings.fused_into[node] = step.node
    return timings


def band_colour(ms: float) -> str:
    """The fill of a node that takes `ms` milliseconds per call."""
    if ms < 0.05:
        return GREEN
    return YELLOW if ms <= 0.5 else RED


def latency_label(ms: float) -> str:
    """`2.3ms`: two significant digits below 10 ms, whole milliseconds above."""
    if ms >= 10:
        return f"{ms:.0f}ms"
    return f"{ms:.1f}ms" if ms >= 1 else f"{ms:.2g}ms"


def dot_text(graph: Graph, timings: Timings | None, threshold_ms: float = 0.1) -> str:
    """The DOT text of `graph`, coloured by `timings` (None: no latency)."""
    title = f"{graph.name}: optimized graph" + (
        f", time per call over {timings.runs} run(s)" if timings else "")
    lines = [f"digraph {quote(graph.name)} {{",
             f"  graph [rankdir=TB, fontname=Helvetica, label={quote(title)}];",
             '  node [shape=box, style="rounded,filled", fillcolor=white, fontname=Helvetica];']
    outputs = set(graph.outputs)
    shown = [n for n in graph if n.op not in HIDDEN_OPS]
    for node in shown:
        attrs = node_attrs(node, graph, timings, threshold_ms, outputs)
        lines.append(f"  {quote(node.name)} [{attrs}];")
    for node in shown:
        for i in dict.fromkeys(node.inputs):
            if graph[i].op not in HIDDEN_OPS:
                lines.append(f"  {quote(i)} -> {quote(node.name)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def node_attrs(node: Node, graph: Graph, timings: Timings | None, threshold_ms: float,
               outputs: set[str]) -> str:
    """`label=..., fillcolor=..., tooltip=...` of one node."""
    attrs: dict[str, str] = {"label": node.op}
    if node.op == "input":
        attrs.update(label=f"input {node.name}", shape="ellipse")
    ms = timings.latency_ms.get(node.name) if timings else None
    if ms is not None:
        attrs["fillcolor"] = band_colour(ms)
        if ms >= threshold_ms:
            attrs["label"] = f"{node.op} [{latency_label(ms)}]"
    if timings and node.name in timings.fused_into:
        attrs["style"] = "rounded,filled,dashed"
    if node.name in outputs:
        attrs["peripheries"] = "2"
    attrs["tooltip"] = "\n".join(provenance(node, graph, timings))
    return ", ".join(f"{k}={quote(v)}" for k, v in attrs.items())


def provenance(node: Node, graph: Graph, timings: Timings | None) -> list[str]:
    """Tooltip lines: definition and type, source line, rules with `path:line`, kernels."""
    lines = [f"{node.name} = {node.op}({', '.join(node.inputs)}) : {node.type}"]
    if node.source:
        lines.append(f"from {node.source}")
    report = graph.report
    if node.origin:
        rules = [report.rule_line(r) if report is not None else r
                 for r in dict.fromkeys(node.origin)]
        lines.append("rules: " + " <- ".join(rules))
    elif node.op not in ("input",):
        lines.append("imported unchanged (no rule produced it)")
    if timings is not None:
        if node.name in timings.latency_ms:
            lines.append(f"{timings.latency_ms[node.name]:.4f} ms per call")
            lines += [f"  {k}" for k in timings.kernels.get(node.name, [])]
        elif node.name in timings.fused_into:
            lines.append(f"computed in the kernel of {timings.fused_into[node.name]} "
                         "(timed there)")
    return lines


def quote(text: str) -> str:
    """A DOT double-quoted string (newlines become DOT's `\\n`)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n") + '"'


def output_format(path: str | Path) -> str:
    """"dot" for a text file, else Graphviz's name of the format; a one-line error for an
    unknown suffix, or a rendered format without Graphviz (before any work is done)."""
    suffix = Path(path).suffix.lower()
    if suffix in TEXT_FORMATS:
        return "dot"
    if suffix in RENDERED_FORMATS:
        if shutil.which("dot") is None:
            raise CuvilError(f"{path}: writing {suffix} needs Graphviz's `dot` program, "
                             "which is not installed (install graphviz, or write a .dot file)")
        return RENDERED_FORMATS[suffix]
    raise CuvilError(f"{path}: unknown graph format {suffix or '(none)'!r}; "
                     "expected .dot, .gv, .svg or .png")


def write_output(text: str, path: str | Path, fmt: str) -> None:
    """Write DOT text, or render it with Graphviz's `dot` (atomically either way)."""
    if fmt == "dot":
        write_text(path, text)
        return
    command = [shutil.which("dot") or "dot", f"-T{fmt}"]
    done = subprocess.run(command, input=text.encode(), capture_output=True, check=False)
    if done.returncode != 0:
        reason = (done.stderr.decode(errors="replace").strip().splitlines() or ["failed"])[0]
        raise CuvilError(f"{path}: Graphviz's dot failed: {reason}")
    write_bytes(path, done.stdout)
