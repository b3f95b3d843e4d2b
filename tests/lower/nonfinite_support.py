"""Inputs holding NaN and +-inf, and the check that a compiled model's outputs have eager's
non-finite pattern: NaN at the same places, +-inf at the same places with the same signs,
the finite values close.

Torch's own CPU paths disagree on a few non-finite cases: its GELU of a contiguous tensor
is NaN at +inf where its element-at-a-time path (a strided tensor) and the tanh form give
+inf, and its flash attention kernel gives 0 or finite rows where the math backend (the
documented `softmax(q k^T * scale + mask) @ v`) gives NaN. The compiled result must match
one of eager's paths: run as given, on strided copies of the inputs (GELU on a strided
copy of its input), or with `scaled_dot_product_attention` on the math backend.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

import cuvil


def nonfinite(*shape: int, seed: int = 0, share: float = 0.1) -> torch.Tensor:
    """Normal values with `share` of them NaN, as many +inf and as many -inf, at random."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    flat, n = x.view(-1), x.numel()
    order, k = torch.randperm(n, generator=g), max(1, int(n * share))
    for i, v in enumerate((float("nan"), float("inf"), float("-inf"))):
        flat[order[i * k:(i + 1) * k]] = v
    return x


# Row patterns: finite; one NaN; one +inf; one -inf; +inf and -inf; NaN and +inf; all
# -inf; NaN first; -inf last with a NaN.
ROWS = ([], [("nan", 3)], [("inf", 2)], [("-inf", 1)], [("inf", 0), ("-inf", 5)],
        [("nan", 4), ("inf", 1)], "all -inf", [("nan", 0)], [("-inf", -1), ("nan", 6)])


def nonfinite_rows(*shape: int, seed: int = 0) -> torch.Tensor:
    """Rows (of the last dim) in turn with the patterns of `ROWS`: a max that would be
    finite but for a NaN, a row whose max is +inf, one that is all -inf, ..."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    rows = x.view(-1, shape[-1])
    for r in range(rows.shape[0]):
        pattern = ROWS[r % len(ROWS)]
        if pattern == "all -inf":
            rows[r] = float("-inf")
            continue
        for value, j in pattern:
            rows[r, j % shape[-1]] = float(value)
    return x


def difference(got: torch.Tensor, want: torch.Tensor, tol: float) -> str | None:
    """Why `got` does not have `want`'s values and non-finite pattern; None if it does."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{got.dtype}{list(got.shape)} != {want.dtype}{list(want.shape)}"
    if not want.is_floating_point():
        return None if torch.equal(got, want) else "values differ"
    gn, wn = got.isnan(), want.isnan()
    if not torch.equal(gn, wn):
        return f"NaN at {(gn & ~wn).sum()} places eager has none, missing at {(wn & ~gn).sum()}"
    gi, wi = got.isinf(), want.isinf()
    if not torch.equal(gi, wi) or not torch.equal(got[gi], want[wi]):
        return f"+-inf differ at {((gi != wi) | (gi & wi & (got != want))).sum()} places"
    finite = ~(gn | gi)
    if not torch.allclose(got[finite], want[finite], atol=tol, rtol=tol):
        return f"finite values differ by {(got[finite] - want[finite]).abs().max():.3g}"
    return None


def _strided(x):
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        return x
    wide = torch.empty((*x.shape[:-1], 2 * x.shape[-1]), dtype=x.dtype)
    wide[..., ::2] = x
    return wide[..., ::2]


class _StridedGelu(TorchFunctionMode):
    """GELU computed on a strided copy of its input: torch's element-at-a-time path."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (F.gelu, torch._C._nn.gelu) and isinstance(args[0], torch.Tensor):
            args = (_strided(args[0]), *args[1:])
        return func(*args, **(kwargs or {}))


def eager_paths(model, inputs) -> list:
    """The model's eager outputs by each of torch's paths (module docstring)."""
    with torch.no_grad():
        results = [model(*inputs)]
        with _StridedGelu():
            results.append(model(*[_strided(x) for x in inputs]))
        with sdpa_kernel(SDPBackend.MATH):
            results.append(model(*inputs))
    return results


def assert_nonfinite_like_eager(model, inputs, tol: float = 1e-4) -> None:
    """`cuvil.compile(model)` gives, on `inputs`, one of eager's paths' outputs: each output
    with its NaN and +-inf where that path has them, its finite values close."""
    compiled = cuvil.compile(model, inputs)
    got = pytree.tree_leaves(compiled(*inputs))
    failures = []
    for k, g in enumerate(got):
        whys = [difference(g, pytree.tree_leaves(path)[k], tol)
                for path in eager_paths(model, inputs)]
        if all(whys):
            failures.append(f"output {k}: {whys[0]}")
    kernels = sorted({k.template for k in compiled.report.kernels})
    assert not failures, f"kernels {kernels}:\n" + "\n".join(failures)
