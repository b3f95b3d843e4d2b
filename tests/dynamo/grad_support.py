"""PyTorch's OpInfo samples as gradient checks of the `cuvil` torch.compile backend.

For every OpInfo of `tests/ops/opinfo_support.OPINFO_NAMES` (the aten ops the frontend
maps into the catalog) that supports autograd, the first `MAX_SAMPLES` samples in float64
(float32 where the op's backward takes no float64) are called through
`torch.compile(..., backend="cuvil", fullgraph=True)`: AOTAutograd makes the forward and
backward graphs and Cuvil compiles both. Every float input's gradient, for seeded random
output cotangents, is compared with eager's. An outcome is one of

- pass: each gradient within `RELATIVE` of eager's (norm of the difference over the norm
  of eager's; NaN at the same places), every graph compiled by Cuvil;
- refused: Cuvil refused a graph, which ran in eager PyTorch with a `cuvil backend`
  warning, and the gradients match eager's (a refusal is never silent);
- skip: the op has no differentiable float output, or Dynamo cannot capture it whole;
- fail: a wrong gradient, a refusal without a warning, or any other exception.

The samples of several OpInfos are compiled together (`GROUP` at a time: one forward and
one backward graph, a fraction of the compile time); a group with any outcome but a pass
is run again one OpInfo at a time, which then says which op it was.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils import _pytree as pytree

from cuvil.dynamo import COUNTS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))
from opinfo_support import OPINFO_NAMES, opinfos  # noqa: E402

MAX_SAMPLES = int(os.environ.get("CUVIL_OPINFO_GRAD_SAMPLES", "3"))
RELATIVE = 1e-4
GROUP = 12  # OpInfos compiled together
PASS, REFUSED, SKIP, FAIL = "pass", "refused", "skip", "fail"
INPUT = "<float input>"  # a leaf that is one of a sample's inputs


@dataclass
class Outcome:
    status: str
    reason: str = ""
    whole: bool = False  # the whole compile's outcome (an exception), not this sample's


@dataclass
class GradCase:
    """One sample: `call(*inputs)` is the op applied to it; `inputs` are its float tensors
    (fresh leaves), the other arguments are fixed inside `call`."""

    label: str
    test_id: str
    leaves: list
    spec: object
    fn: object
    inputs: tuple[torch.Tensor, ...]

    def call(self, *tensors: torch.Tensor):
        given = iter(tensors)
        flat = [next(given) if leaf is INPUT else leaf for leaf in self.leaves]
        x, args, kwargs = pytree.tree_unflatten(flat, self.spec)
        return self.fn(x, *args, **kwargs)


def grad_ids() -> list[str]:
    """The OpInfo test ids (`name` or `name.variant`) of the catalog's ops with autograd."""
    wanted = set(OPINFO_NAMES)
    return [i for i, op in opinfos().items() if op.name in wanted and _dtype(op) is not None]


def _dtype(op) -> torch.dtype | None:
    if not op.supports_autograd:
        return None
    backward = op.supported_backward_dtypes("cpu")
    return next((d for d in (torch.float64, torch.float32) if d in backward), None)


@functools.cache
def grad_cases(test_id: str) -> tuple[GradCase, ...]:
    """The first `MAX_SAMPLES` samples of an OpInfo that draw no random numbers, seeded;
    every float tensor of a sample is an input (a copy: no tensor is an input twice)."""
    op = opinfos()[test_id]
    dtype = _dtype(op)
    torch.manual_seed(0)
    samples = [s for s in op.sample_inputs("cpu", dtype, requires_grad=True)
               if not s.kwargs.get("dropout_p")][:MAX_SAMPLES]
    cases = []
    for i, sample in enumerate(samples):
        flat, spec = pytree.tree_flatten((sample.input, tuple(sample.args), sample.kwargs))
        grads = [isinstance(v, torch.Tensor) and v.requires_grad for v in flat]
        leaves = [INPUT if g else v for v, g in zip(flat, grads, strict=True)]
        inputs = tuple(v.detach().clone() for v, g in zip(flat, grads, strict=True) if g)
        cases.append(GradCase(f"{test_id}[{i}] {_describe(flat)}", test_id, leaves, spec,
                              _function(op), inputs))
    return tuple(cases)


def _function(op):
    """The OpInfo's function; for one wrapped in `wrapper_set_seed` (it seeds torch's
    generator, which Dynamo does not trace), the torch function of its name."""
    code = getattr(op.op, "__code__", None)
    if code is None or "wrapper_set_seed" not in code.co_names:
        return op.op
    return functools.reduce(getattr, op.name.split("."), torch)


def _describe(flat: list) -> str:
    return "(" + ", ".join(f"{str(v.dtype).removeprefix('torch.')}{list(v.shape)}"
                           if isinstance(v, torch.Tensor) else repr(v) for v in flat) + ")"


def differentiable(out) -> list[torch.Tensor]:
    return [o for o in pytree.tree_leaves(out)
            if isinstance(o, torch.Tensor) and o.requires_grad]


def fresh(case: GradCase) -> tuple[torch.Tensor, ...]:
    return tuple(x.detach().clone().requires_grad_() for x in case.inputs)


def gradients(call, cases: list[GradCase]) -> list[tuple]:
    """Each case's input gradients (None where unused) for `call(*all inputs)`, which
    returns one result per case, with seeded random cotangents."""
    inputs = [fresh(c) for c in cases]
    results = call(*[x for xs in inputs for x in xs])
    generator = torch.Generator().manual_seed(1)
    grads = []
    for xs, result in zip(inputs, results, strict=True):
        outs = differentiable(result)
        cotangents = [torch.randn(o.shape, dtype=o.dtype, generator=generator) for o in outs]
        grads.append(torch.autograd.grad(outs, xs, cotangents, allow_unused=True,
                                         retain_graph=True) if outs else None)
    return grads


def batch(cases: list[GradCase]):
    """One function of every case's inputs in turn, returning each case's result."""
    arity = [len(c.inputs) for c in cases]

    def call(*tensors):
        results, start = [], 0
        for case, n in zip(cases, arity, strict=True):
            results.append(case.call(*tensors[start:start + n]))
            start += n
        return results

    return call


def mismatch(got: tuple | None, want: tuple | None) -> str:
    """Why `got` is not `want` (gradients of one case), or "". Each error is relative to
    eager's gradient, or to 1e-9 of the case's largest where eager's is less: rounding
    noise of a gradient that is zero in exact arithmetic (eager's 1.4e-14 for a layer
    norm's weight over one element) has no relative error to keep."""
    if want is None:
        return "" if got is None else "a gradient where eager has none"
    floor = max(1e-9 * max((w.nan_to_num().norm().item() for w in want if w is not None),
                           default=0.0), 1e-30)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        if (g is None) != (w is None):
            return f"input {k}: gradient {'missing' if g is None else 'where eager has none'}"
        if w is None:
            continue
        if g.shape != w.shape or not torch.equal(g.isnan(), w.isnan()):
            return f"input {k}: shape {list(g.shape)} or NaNs differ from eager's"
        err = ((g - w).nan_to_num().norm() / w.nan_to_num().norm().clamp_min(floor)).item()
        if err > RELATIVE:
            return f"input {k}: relative error {err:.2e} > {RELATIVE:g}"
    return ""


def run_together(cases: list[GradCase]) -> list[Outcome]:
    """The outcome of each case, all compiled as one function."""
    want = gradients(batch(cases), cases)
    torch._dynamo.reset()
    before = COUNTS.copy()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = gradients(torch.compile(batch(cases), backend="cuvil", fullgraph=True), cases)
        except torch._dynamo.exc.Unsupported as e:
            return [Outcome(SKIP, f"Dynamo cannot capture it: {_line(e)}", True)] * len(cases)
        except Exception as e:
            return [Outcome(FAIL, f"{type(e).__name__}: {_line(e)}", True)] * len(cases)
    refusals = [_line(w.message) for w in caught if "cuvil backend" in str(w.message)]
    refused = COUNTS["eager"] - before["eager"]
    outcomes = []
    for g, w in zip(got, want, strict=True):
        wrong = mismatch(g, w)
        if wrong:
            outcomes.append(Outcome(FAIL, wrong))
        elif w is None:
            outcomes.append(Outcome(SKIP, "no differentiable output"))
        elif refused and not refusals:
            outcomes.append(Outcome(FAIL, f"{refused} graphs ran in eager without a warning"))
        elif refused:
            outcomes.append(Outcome(REFUSED, refusals[0]))
        else:
            outcomes.append(Outcome(PASS))
    return outcomes


def _line(error) -> str:
    return (str(error).strip().splitlines() or [""])[0][:200]


@functools.cache
def _group_outcomes(group: tuple[str, ...]) -> dict[str, list[Outcome]]:
    """test id -> its cases' outcomes: the group compiled together, and where anything
    but a pass came of that, each test id alone."""
    cases = {t: list(grad_cases(t)) for t in group}
    together = run_together([c for t in group for c in cases[t]])
    result, start = {}, 0
    for t in group:
        result[t] = together[start:start + len(cases[t])]
        start += len(cases[t])
    if all(o.status == PASS or (o.status == SKIP and not o.whole) for o in together):
        return result
    alone = {t: run_together(cases[t]) if cases[t] else [] for t in group}
    for t in group:  # wrong together, right alone: still wrong
        alone[t] = [Outcome(FAIL, f"wrong only when compiled with other ops: {o.reason}")
                    if o.status == FAIL and not o.whole and a.status == PASS else a
                    for o, a in zip(result[t], alone[t], strict=True)]
    return alone


def outcomes(test_id: str) -> list[tuple[str, Outcome]]:
    """(label, outcome) of each sample of `test_id`."""
    ids = grad_ids()
    start = ids.index(test_id) // GROUP * GROUP
    group = tuple(ids[start:start + GROUP])
    return list(zip([c.label for c in grad_cases(test_id)], _group_outcomes(group)[test_id],
                    strict=True))
