"""`cuvil import MODEL`: print the Cuvil IR of a model and its import report."""

from __future__ import annotations

import argparse

from cuvil.cli.models import FORMS, load_model


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("import", help="import a PyTorch or ONNX model and print its "
                              "Cuvil IR",
                              description="Import a PyTorch model (via torch.export) or an "
                                          ".onnx file and print its Cuvil IR and the import "
                                          "report.")
    p.add_argument("model", metavar="MODEL", help=FORMS)
    p.add_argument("--static", action="store_true",
                   help="static shapes (default: dim 0 of each input is a symbolic batch)")
    p.add_argument("--strict", action="store_true",
                   help="fail if an op has no Cuvil catalog entry (default: run it in torch)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from cuvil.frontend import from_torch
    from cuvil.onnx import from_onnx, is_onnx

    model, inputs = load_model(args.model)
    if is_onnx(model):  # its shapes are the file's (dim_params are symbolic): no --static
        graph = from_onnx(model)
    else:
        graph = from_torch(model, inputs, dynamic_shapes=False if args.static else None,
                           strict=args.strict)
    print(graph.to_text(), end="")
    print(graph.import_report)
    return 0
