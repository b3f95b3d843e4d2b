"""Snapshots of generated kernel source for a few graphs (`tests/lower/snapshots/*.py`).

The generated text must be deterministic and change only on purpose. After an intended
change to a template, regenerate the snapshots and review the diff:

    CUVIL_UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/lower/test_snapshots.py

Import lines quote the runtime's source hash, which changes with any runtime file: the
snapshots hold `<runtime hash>` in its place, and a test of its own checks that the text
quotes the current one.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch
from lowering_support import B, t

from cuvil.ir import Graph
from cuvil.library import load
from cuvil.lower import lower_to_source
from cuvil.paths import drivers_hash

SNAPSHOTS = Path(__file__).parent / "snapshots"
RUNTIME_HASH = re.compile(r"(# cuvil\.targets\.cpu\.kernels\.\w+ )[0-9a-f]{12}$", re.MULTILINE)


def linear_relu() -> Graph:
    """A product with the common epilogue: the runtime's `linear_post` is the kernel."""
    return _linear_then("relu")


def linear_tanh() -> Graph:
    """A product with another epilogue: generated."""
    return _linear_then("tanh")


def _linear_then(act: str) -> Graph:
    g = Graph(f"linear_{act}")
    g.defs.update(load("op linear(x, w, b) = add(matmul(x, w), b) kernel gemm\n"
                       f"op linear_{act}(x, w, b) = {act}(linear(x, w, b)) kernel gemm\n").ops)
    x = g.input("x", t(B, 64))
    w, b = g.const(torch.zeros(64, 32), "fc.weight.T"), g.const(torch.zeros(32), "fc.bias")
    g.set_outputs(g.add(f"linear_{act}", [x, w, b], source="model.py:10",
                        origin=(f"linear_{act}", "matmul_add")))
    return g


def broadcast_chain() -> Graph:
    g = Graph("broadcast_chain")
    x = g.input("x", t(B, 8, 16))
    y = g.input("y", t(16))
    h = g.add("mul", [g.add("permute", [x], {"dims": (0, 2, 1)}), g.scalar(0.5)])
    h = g.add("add", [g.add("transpose", [h], {"dim0": 1, "dim1": 2}), y], source="m.py:3")
    g.set_outputs(g.add("gelu", [h], {"approximate": "tanh"}))
    return g


def softmax_rows() -> Graph:
    g = Graph("softmax_rows")
    x = g.input("x", t(B, 128, 256))
    g.set_outputs(g.add("softmax", [x], {"dim": -1}, source="model.py:20"))
    return g


def conv_nhwc() -> Graph:
    g = Graph("conv_nhwc")
    x = g.input("x", t(B, 8, 16, 16, layout="NHWC"))
    w, b = g.const(torch.zeros(16, 8, 3, 3), "conv.weight"), g.const(torch.zeros(16, 1, 1), "b")
    h = g.add("add", [g.add("conv2d", [x, w], {"padding": (1, 1)}, origin=("to_nhwc",)), b])
    g.set_outputs(g.add("relu", [h]))
    return g


def gpt_attention() -> Graph:
    g = Graph("gpt_attention")
    q, k, v = (g.input(n, t(B, 4, 64, 16)) for n in "qkv")
    s = g.add("mul", [g.add("matmul", [q, g.add("transpose", [k], {"dim0": -2, "dim1": -1})]),
                      g.scalar(0.25)])
    p = g.add("softmax", [g.add("masked_fill", [s, g.input("mask", t(64, 64, dtype="bool"))],
                                {"value": float("-inf")})])
    g.set_outputs(g.add("matmul", [p, v], source="gpt.py:40"))
    return g


CASES = [linear_relu, linear_tanh, broadcast_chain, softmax_rows, conv_nhwc, gpt_attention]


@pytest.mark.parametrize("build", CASES, ids=[c.__name__ for c in CASES])
def test_generated_source_matches_snapshot(build):
    text = RUNTIME_HASH.sub(r"\1<runtime hash>", lower_to_source(build(), threads=2))
    path = SNAPSHOTS / f"{build.__name__}.py"
    if os.environ.get("CUVIL_UPDATE_SNAPSHOTS"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no snapshot {path}; run with CUVIL_UPDATE_SNAPSHOTS=1"
    assert text == path.read_text(), f"{path.name} changed; see the module docstring"


def test_import_lines_quote_the_current_drivers_hash():
    lines = [ln for ln in lower_to_source(linear_relu()).splitlines()
             if ln.startswith("from cuvil.targets.cpu.kernels.")]
    assert lines and all(ln.endswith(f" {drivers_hash()}") for ln in lines)


def test_generation_is_deterministic():
    assert lower_to_source(gpt_attention()) == lower_to_source(gpt_attention())
