"""PyTorch's OpInfo samples (those of the CPU sweep, `tests/ops/test_opinfo.py`) compiled
with `target="cuda"` under the CUDA simulator and compared with torch eager.

The first two samples of each OpInfo (all its variants; with its other tensors as inputs
and as weights), the OpInfos taken a dozen at a time as one model: a chunk is one export, one
optimizer run and one kernel module, which keeps the sweep to a couple of minutes on one
core. A chunk that does not compile is compiled sample
by sample, to say which one. A sample passes when its values match eager; a fallback is
allowed only for what has no CUDA kernel by declaration: an opaque `torch_op`, an op the
catalog runs in torch, or a family in the CUDA target's `WITHOUT_KERNEL`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import cuvil
from cuvil.ops import registry
from cuvil.targets.cuda.target import WITHOUT_KERNEL

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "ops"))
import opinfo_support as sweep  # noqa: E402

CHUNK = 12  # OpInfos per compiled model


def first_samples(names) -> list[sweep.Case]:
    """The first two samples of each variant of each OpInfo named: their tensors all
    inputs, and (with two or more) the others weights, constants uploaded to the device."""
    ids = [i for n in names for i in sweep.opinfos() if i == n or i.startswith(n + ".")]
    return [c for i in ids for c in sweep.cases(i)[:4]
            if c.label.startswith((f"{i}[0", f"{i}[1"))]


def declared_fallback(op: str) -> bool:
    """Whether the CUDA target says it has no kernel for `op` (a report's op name)."""
    if op.startswith("torch_op") or not registry.exists(op):
        return True
    return registry.get(op).lowering in ("fallback", "composite", *WITHOUT_KERNEL)


def run_on_cuda(cases: list[sweep.Case]) -> list[tuple[str, sweep.Outcome]]:
    """(label, outcome) per case; a fallback nothing declares is a failure of its chunk."""
    prepared = [sweep.prepare(c) for c in cases]
    live = [k for k, (skip, _) in enumerate(prepared) if skip is None]
    inputs = tuple(t for k in live for t in cases[k].inputs)
    try:
        compiled = cuvil.compile(sweep.Batch([cases[k].module for k in live]), inputs,
                                 target="cuda", cache=False)
        results = compiled(*inputs)
    except Exception as e:
        if len(cases) == 1:
            return [(cases[0].label, sweep.error_outcome(e))]
        return [pair for case in cases for pair in run_on_cuda([case])]
    outcomes = [(c.label, skip) for c, (skip, _) in zip(cases, prepared, strict=True)]
    for k, result in zip(live, results, strict=True):
        outcomes[k] = (cases[k].label,
                       sweep.compare(result, prepared[k][1], cases[k].tolerance))
    stray = [f for f in compiled.report.fallbacks if not declared_fallback(f.op)]
    if stray:
        outcomes.append(("fallbacks", sweep.Outcome(sweep.FAIL, "; ".join(
            f"{f.op}: {f.reason}" for f in stray))))
    return outcomes


CHUNKS = [sweep.OPINFO_NAMES[i:i + CHUNK] for i in range(0, len(sweep.OPINFO_NAMES), CHUNK)]


@pytest.mark.parametrize("names", CHUNKS, ids=lambda names: f"{names[0]}..{names[-1]}")
def test_opinfo_samples_on_cuda_match_eager(names):
    outcomes = run_on_cuda(first_samples(names))
    failures = [f"{label}: {o.reason}" for label, o in outcomes if o.status == sweep.FAIL]
    assert not failures, "\n".join(failures)
    assert any(o.status == sweep.PASS for _, o in outcomes), outcomes
