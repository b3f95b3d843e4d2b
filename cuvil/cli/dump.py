"""`cuvil dump MODEL -o FILE`: the optimized graph as DOT, SVG or PNG, coloured by latency.

By default the model is compiled and run (`--runs` times, on its example inputs or on
made-up ones for a `.pt2` file); each node shows its time per call and is filled by band,
and the summary table (op kind, count, mean us, share) is printed. `--trace FILE` writes
the runtime trace merged with the compile's pass timings (Chrome trace, for Perfetto).
"""

from __future__ import annotations

import argparse

from cuvil.cli.optimize import add_common, optimized
from cuvil.errors import CuvilError


def add_parser(sub) -> None:
    p = sub.add_parser("dump", help="draw the optimized graph, coloured by measured latency",
                       description="Compile MODEL, time each kernel over a few runs and write "
                                   "the optimized graph as .dot/.gv, or .svg/.png through "
                                   "Graphviz's dot: nodes labelled `op [2.3ms]`, filled "
                                   "green/yellow/red under 0.05 ms / to 0.5 ms / above, "
                                   "tooltips with the rules behind each node.")
    add_common(p)
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the graph file: .dot, .gv, .svg or .png")
    p.add_argument("--no-latency", action="store_true",
                   help="only optimize: draw the graph without compiling or timing it")
    p.add_argument("--threshold", type=float, default=0.1, metavar="MS",
                   help="label nodes taking at least MS milliseconds per call (default 0.1)")
    p.add_argument("--runs", type=int, default=10, metavar="N",
                   help="timed runs (default 10)")
    p.add_argument("--trace", metavar="FILE",
                   help="write the runtime trace and the compile's pass timings (Chrome trace)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from cuvil.dump import dot_text, dump_profiled, output_format, write_output

    fmt = output_format(args.output)  # a bad file name fails before any work
    if args.runs < 1:
        raise CuvilError("--runs must be at least 1")
    if args.no_latency:
        if args.trace:
            raise CuvilError("--trace needs the timed runs that --no-latency leaves out")
        write_output(dot_text(optimized(args), None), args.output, fmt)
    else:
        compiled, inputs = _compiled(args)
        _, prof = dump_profiled(compiled, args.output, inputs, runs=args.runs,
                                threshold_ms=args.threshold, trace=args.trace)
        print(prof)
        if args.trace:
            print(f"trace written to {args.trace}")
    print(f"graph written to {args.output}")
    return 0


def _compiled(args: argparse.Namespace):
    """The MODEL of `args` compiled as the options say, and its example inputs (or ())."""
    from cuvil.cli.models import load_model
    from cuvil.pipeline import compile

    model, inputs = load_model(args.model)
    limits = {"time": args.time_limit} if args.time_limit else None
    compiled = compile(model, inputs or None, rules=args.rules, target=args.target or "cpu",
                       limits=limits, dynamic_shapes=False if args.static else None,
                       disable=args.disable, verify=args.verify)
    return compiled, inputs
