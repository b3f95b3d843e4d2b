"""`cuvil export MODEL -o model.onnx`: optimize a model and write the graph as ONNX."""

from __future__ import annotations

import argparse

from cuvil.cli.optimize import add_common, optimized


def add_parser(sub) -> None:
    p = sub.add_parser("export", help="optimize a model and write it as an ONNX file",
                       description="Optimize MODEL with the rules and write the optimized "
                                   "graph as an ONNX model for ONNX Runtime: fused ops as "
                                   "ONNX Runtime's contrib ops where one matches "
                                   "exactly, else the standard ops of their .cvr "
                                   "definitions.")
    add_common(p)
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the .onnx file to write")
    p.add_argument("--no-contrib", dest="contrib", action="store_false",
                   help="standard ONNX ops only: no com.microsoft contrib ops (FusedConv, "
                        "BiasGelu), every fused op expanded")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from cuvil.onnx import to_onnx

    graph = optimized(args)
    model = to_onnx(graph, args.output, contrib=args.contrib)
    print(f"{args.output}: {len(model.graph.node)} ONNX nodes from {len(graph.ops())} "
          f"Cuvil ops")
    return 0
