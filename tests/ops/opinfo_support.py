"""PyTorch's OpInfo samples as Cuvil test cases: which ops, which samples, how each is run.

The first `MAX_SAMPLES` float32 samples (bool or int64 for ops without float) of each
OpInfo become tiny modules calling the op with the sample's non-tensor arguments fixed: one
with every tensor an input, and, with two or more tensors, one with the first an input and
the others weights (buffers, as a model holds them). Each runs in two modes against torch
eager: `reference` imports it with Cuvil's frontend and runs the reference executor;
`compiled` runs `cuvil.compile` (default options, compile cache on), all samples of one
OpInfo compiled as one model and, if that raises or a value is wrong, each alone;
`nonfinite` runs them so with NaN, +inf and -inf put into their float inputs (`nonfinite`),
where a pass also needs eager's NaN and +-inf at the same places. An outcome is one of

- pass: the values match eager within the loosest float32 tolerance the OpInfo's own
  tests allow (else `assert_close`'s default);
- skip: torch.export cannot export it, Cuvil does not take its inputs (complex dtypes,
  tensors off the CPU), or it draws random numbers; counted separately, with the reason;
- rejected: a one-line `CuvilError` saying what Cuvil does not do;
- fail: a wrong value, or any other exception.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.utils import _pytree as pytree

import cuvil
from cuvil.errors import CuvilError
from cuvil.ir.types import DType
from cuvil.ops.execute import run as run_reference

# The OpInfos whose aten ops the frontend maps into the catalog (every variant of each).
OPINFO_NAMES = (
    # elementwise arithmetic and comparisons
    "add", "sub", "rsub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le",
    "gt", "ge", "logical_and", "logical_or", "logical_not", "bitwise_and", "bitwise_or",
    "bitwise_not", "max", "min",
    # unary math and activations
    "neg", "sqrt", "rsqrt", "exp", "log", "tanh", "erf", "sigmoid", "reciprocal", "abs",
    "sin", "cos",
    "nn.functional.relu", "nn.functional.relu6", "nn.functional.silu", "nn.functional.gelu",
    "nn.functional.hardtanh", "nn.functional.hardsigmoid", "nn.functional.hardswish",
    "clamp", "clamp_min", "clamp_max", "where", "masked_fill",
    # tensors made from sizes
    "arange",
    # conversions
    "clone", "contiguous", "to",
    # linear algebra
    "matmul", "mm", "bmm", "addmm", "nn.functional.linear", "t", "transpose",
    # neural-network ops
    "nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.batch_norm",
    "nn.functional.layer_norm",
    "softmax", "log_softmax", "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
    "nn.functional.adaptive_avg_pool2d", "nn.functional.embedding",
    "nn.functional.scaled_dot_product_attention",
    # reductions
    "sum", "mean", "amax", "var",
    # shape ops
    "reshape", "view", "unflatten", "expand", "expand_as", "view_as", "reshape_as",
    "permute", "flip", "flatten", "unsqueeze", "squeeze", "cat", "split", "split_with_sizes",
    "chunk", "narrow", "select", "unbind",
    # scans and advanced indexing
    "cumsum", "diff", "__getitem__", "gather",
)
MODES = ("reference", "compiled", "nonfinite")
# Samples per OpInfo: the sweep stays a few minutes on two cores (more: set the variable).
MAX_SAMPLES = int(os.environ.get("CUVIL_OPINFO_SAMPLES", "8"))
PASS, SKIP, REJECTED, FAIL = "pass", "skip", "rejected", "fail"
TAKEN_DTYPES = {d.torch for d in DType}
TENSOR = "<tensor input>"


@functools.cache
def opinfos() -> dict[str, object]:
    """Test id (`name` or `name.variant`) -> OpInfo, for the names above."""
    from torch.testing._internal import common_utils

    # torch's harness would import numba.cuda to probe it, and then the CUDA simulator
    # tests (tests/targets/cuda) could no longer switch the simulator on in this process
    common_utils.TEST_NUMBA = False
    from torch.testing._internal.common_methods_invocations import op_db

    wanted = set(OPINFO_NAMES)
    return {op.name + (f".{op.variant_test_name}" if op.variant_test_name else ""): op
            for op in op_db if op.name in wanted}


@dataclass
class Outcome:
    status: str
    reason: str = ""


@dataclass
class Tally:
    """Outcomes per mode, summed over the ops the session ran."""

    counts: dict[str, Counter] = field(default_factory=lambda: {m: Counter() for m in MODES})
    failures: dict[str, list[str]] = field(default_factory=lambda: {m: [] for m in MODES})
    seconds: Counter = field(default_factory=Counter)

    def add(self, mode: str, label: str, outcome: Outcome) -> None:
        self.counts[mode][outcome.status] += 1
        if outcome.status == FAIL:
            self.failures[mode].append(f"{label}: {outcome.reason}")

    def percent(self, mode: str) -> float:
        c = self.counts[mode]
        taken = c[PASS] + c[REJECTED] + c[FAIL]
        return 100.0 * c[PASS] / taken if taken else 100.0

    def lines(self) -> list[str]:
        """Per mode: the counts, the pass rate, the time; then the first failures."""
        lines = [f"{mode}: {c[PASS]} pass, {c[SKIP]} skip, {c[REJECTED]} rejected, "
                 f"{c[FAIL]} fail ({self.percent(mode):.1f}% of the samples Cuvil takes "
                 f"pass) in {self.seconds[mode]:.0f} s"
                 for mode, c in self.counts.items() if sum(c.values())]
        for mode, failures in self.failures.items():
            lines += [f"  {mode} FAIL {f}"[:240] for f in failures[:10]]
        return lines


TALLY = Tally()


@dataclass(frozen=True)
class Held:
    """A tensor argument the module holds as its buffer `w<index>` (a weight)."""

    index: int


class OpSample(torch.nn.Module):
    """`op(input, *args, **kwargs)` of one sample: its tensors are the module's inputs, or
    the first one is and the others are the module's weights (buffers)."""

    def __init__(self, fn, spec, leaves: list, held: list[torch.Tensor]):
        super().__init__()
        self.fn, self.spec, self.leaves = fn, spec, leaves  # TENSOR: an input's slot
        for k, tensor in enumerate(held):
            self.register_buffer(f"w{k}", tensor)

    def forward(self, *tensors):
        given = iter(tensors)
        flat = [next(given) if leaf is TENSOR else
                getattr(self, f"w{leaf.index}") if isinstance(leaf, Held) else leaf
                for leaf in self.leaves]
        x, args, kwargs = pytree.tree_unflatten(flat, self.spec)
        return self.fn(x, *args, **kwargs)


@dataclass
class Case:
    label: str
    module: OpSample
    inputs: tuple[torch.Tensor, ...]
    tolerance: dict


def pick_dtype(op) -> torch.dtype:
    supported = op.supported_dtypes("cpu")
    return next((d for d in (torch.float32, torch.bool, torch.int64) if d in supported),
                torch.float32)


def tolerance(op, dtype: torch.dtype) -> dict:
    """The loosest float32 tolerance the OpInfo's own tests allow; else assert_close's."""
    from torch.testing._internal.common_device_type import toleranceOverride

    found = []
    for info in op.decorators:
        for dec in getattr(info, "decorators", [info]):
            if isinstance(dec, toleranceOverride) and dtype in dec.d:
                found.append(dec.d[dtype])
    if not found:
        return {}
    return {"atol": max(t.atol for t in found), "rtol": max(t.rtol for t in found)}


def cases(test_id: str) -> list[Case]:
    """The first `MAX_SAMPLES` samples of an OpInfo, seeded, as modules and inputs: each
    with all its tensors as inputs, and (with two or more) with the others as weights."""
    op = opinfos()[test_id]
    dtype = pick_dtype(op)
    torch.manual_seed(0)
    # All of them: a generator left open is closed when collected, maybe inside an export.
    samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))[:MAX_SAMPLES]
    result = []
    for i, sample in enumerate(samples):
        flat, spec = pytree.tree_flatten((sample.input, tuple(sample.args), sample.kwargs))
        tensors = [k for k, v in enumerate(flat) if isinstance(v, torch.Tensor)]
        for weights in (False, True) if len(tensors) > 1 else (False,):
            leaves, held, inputs = list(flat), [], []
            for k in tensors:  # copies: no tensor is in two cases (a batch would share it)
                leaves[k] = Held(len(held)) if weights and k != tensors[0] else TENSOR
                (inputs if leaves[k] is TENSOR else held).append(flat[k].clone())
            label = f"{test_id}[{i}{'w' if weights else ''}] {_describe(sample)}"
            result.append(Case(label, OpSample(op.op, spec, leaves, held), tuple(inputs),
                               tolerance(op, dtype)))
    return result


def _describe(sample) -> str:
    def short(v):
        if isinstance(v, torch.Tensor):
            return f"{str(v.dtype).removeprefix('torch.')}{list(v.shape)}"
        return repr(v)

    parts = [short(v) for v in pytree.tree_leaves((sample.input, tuple(sample.args)))]
    parts += [f"{k}={short(v)}" for k, v in sample.kwargs.items()]
    return "(" + ", ".join(parts) + ")"


def run_case(case: Case, mode: str) -> Outcome:
    """Run one sample in `mode` and compare with eager."""
    skip, expected = prepare(case)
    if skip is not None:
        return skip
    try:
        graph, result = _run(case, mode)
    except Exception as e:
        return error_outcome(e)
    return judge(result, expected, case, graph)


def nonfinite(case: Case, seed: int) -> Case:
    """`case` with about a tenth of each float input's elements NaN, as many +inf and as
    many -inf (at least one NaN), at seeded random places."""
    g = torch.Generator().manual_seed(seed)
    inputs = []
    for x in case.inputs:
        x = x.clone()
        if x.is_floating_point() and x.numel():
            flat, k = x.view(-1), max(1, x.numel() // 10)
            order = torch.randperm(x.numel(), generator=g)
            for i, v in enumerate((float("nan"), float("inf"), float("-inf"))):
                flat[order[i * k:(i + 1) * k]] = v
        inputs.append(x)
    return Case(case.label, case.module, tuple(inputs), case.tolerance)


def run_cases(cases: list[Case], mode: str) -> list[Outcome]:
    """The outcomes of `cases`. Compiled, the samples are first compiled together as one
    model (one export, optimizer run and kernel module: a third of the time); if that
    raises, each is compiled alone to say which one did."""
    if mode == "nonfinite":
        cases = [nonfinite(c, k) for k, c in enumerate(cases)]
    if mode == "reference" or len(cases) < 2:
        return [run_case(c, mode) for c in cases]
    prepared = [prepare(c) for c in cases]
    live = [k for k, (skip, _) in enumerate(prepared) if skip is None]
    batch = Batch([cases[k].module for k in live])
    inputs = tuple(t for k in live for t in cases[k].inputs)
    try:
        compiled = cuvil.compile(batch, inputs)  # the default compile cache on
        results = compiled(*inputs)
    except Exception:
        return [run_case(c, mode) for c in cases]
    outcomes = [skip for skip, _ in prepared]
    for k, result in zip(live, results, strict=True):
        outcomes[k] = compare(result, prepared[k][1], cases[k].tolerance)
        if outcomes[k].status == FAIL:
            outcomes[k] = _alone(cases[k], outcomes[k])
    return outcomes


def _alone(case: Case, in_batch: Outcome) -> Outcome:
    """A sample wrong when compiled with others, compiled alone: a random op skips; wrong
    values stay wrong, whichever way they show."""
    alone = run_case(case, "compiled")  # the inputs are the case's, non-finite or not
    if alone.status == PASS:
        return Outcome(FAIL, f"wrong only when compiled with other samples: {in_batch.reason}")
    return alone


class Batch(torch.nn.Module):
    """Several samples as one model: their inputs in turn, a tuple of their results."""

    def __init__(self, samples: list[OpSample]):
        super().__init__()
        self.samples = torch.nn.ModuleList(samples)
        self.arity = [sum(leaf is TENSOR for leaf in m.leaves) for m in samples]

    def forward(self, *tensors):
        results, start = [], 0
        for module, n in zip(self.samples, self.arity, strict=True):
            results.append(module(*tensors[start:start + n]))
            start += n
        return tuple(results)


def prepare(case: Case) -> tuple[Outcome | None, object]:
    """(a skip outcome or None, eager's result) for one sample."""
    bad = [t for t in case.inputs if t.dtype not in TAKEN_DTYPES or t.device.type != "cpu"]
    if bad:
        return Outcome(SKIP, f"input {bad[0].dtype} on {bad[0].device} is not taken"), None
    expected = eager(case, seed=0)
    if compare(eager(case, seed=1), expected, case.tolerance).status != PASS:
        return Outcome(SKIP, "random: eager differs from itself"), None
    try:
        return None, Paths([expected, eager(case, seed=0, strided=True),
                            eager(case, seed=0, math_attention=True)])
    except Exception:  # an op that needs contiguous inputs (`view`)
        return None, expected


def error_outcome(e: Exception) -> Outcome:
    """An export failure skips; a one-line CuvilError is a rejection; the rest fail."""
    if not isinstance(e, CuvilError):
        return Outcome(FAIL, f"{type(e).__name__}: {e}".splitlines()[0])
    text = str(e)
    if text.startswith("torch.export failed"):
        return Outcome(SKIP, text)
    return Outcome(REJECTED if "\n" not in text else FAIL, text)


def judge(result, expected, case: Case, graph) -> Outcome:
    outcome = compare(result, expected, case.tolerance)
    random = random_ops(graph)
    if outcome.status == FAIL and random:
        return Outcome(SKIP, f"random op {random[0]}: torch's random stream is not reproduced")
    return outcome


class Paths(list):
    """Eager's results by its paths: as given, on strided copies of the inputs, and with
    attention on the math backend. They differ only where torch's own kernels disagree (its
    GELU of a contiguous tensor is NaN at +inf, +inf element by element; flash attention
    can give 0 where the math backend gives NaN); a result matching any passes."""


def eager(case: Case, seed: int, strided: bool = False, math_attention: bool = False):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(seed)
    inputs = [_strided(x) for x in case.inputs] if strided else case.inputs
    backend = sdpa_kernel(SDPBackend.MATH) if math_attention else contextlib.nullcontext()
    with torch.no_grad(), backend:
        return case.module(*inputs)


def _strided(x: torch.Tensor) -> torch.Tensor:
    """x's values in a tensor whose last dim has stride 2."""
    if x.dim() == 0:
        return x.clone()
    wide = torch.empty((*x.shape[:-1], 2 * x.shape[-1]), dtype=x.dtype)
    wide[..., ::2] = x
    return wide[..., ::2]


def _run(case: Case, mode: str):
    """(the graph run, its outputs) in `mode`."""
    if mode == "reference":
        graph = cuvil.from_torch(case.module, case.inputs)
        return graph, run_reference(graph, *case.inputs)
    compiled = cuvil.compile(case.module, case.inputs)  # the default compile cache on
    return compiled.graph, compiled(*case.inputs)


def random_ops(graph) -> list[str]:
    """The aten ops of `graph`'s `torch_op` nodes that draw random numbers."""
    from cuvil.ir.torch_template import resolve_target

    targets = [n.attrs["target"] for n in graph if n.op == "torch_op"]
    return [t for t in targets
            if torch.Tag.nondeterministic_seeded in getattr(resolve_target(t), "tags", ())]


def compare(got, expected, tol: dict) -> Outcome:
    """Pass if `got` matches `expected` (NaN at the same places, +-inf equal, the rest
    close), or, for `Paths`, any of them."""
    if isinstance(expected, Paths):
        outcomes = [compare(got, e, tol) for e in expected]
        return next((o for o in outcomes if o.status == PASS), outcomes[0])
    want, got = pytree.tree_leaves(expected), pytree.tree_leaves(got)
    if len(want) != len(got):
        return Outcome(FAIL, f"{len(got)} outputs, eager has {len(want)}")
    for g, w in zip(got, want, strict=True):
        try:
            torch.testing.assert_close(torch.as_tensor(g), w, equal_nan=True, **tol)
        except AssertionError as e:
            return Outcome(FAIL, " ".join(str(e).split("\n")[:4]))
    return Outcome(PASS)
