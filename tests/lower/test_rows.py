"""The row template (softmax, log_softmax, layer_norm, sum, mean, amax): last-dim rows,
reductions over middle dims (strided), keepdim, integer sums, and sums and means over every
dim but an adjacent block (batch norm's statistics), a symbolic batch among them."""

from __future__ import annotations

import pytest
import torch
from lowering_support import B, assert_matches_reference, t

from cuvil.ir import Graph


@pytest.fixture(scope="module")
def rows_graph(lower):
    g = Graph("rows")
    x = g.input("x", t(B, 6, 33))
    i = g.input("i", t(B, 6, dtype="i32"))
    w = g.const(torch.randn(33), "ln.w")
    b = g.const(torch.randn(33), "ln.b")
    outs = {
        "softmax": g.add("softmax", [x], {"dim": -1}),
        "softmax_mid": g.add("softmax", [x], {"dim": 1}),
        "log_softmax": g.add("log_softmax", [x], {"dim": -1}),
        "log_softmax_mid": g.add("log_softmax", [x], {"dim": 1}),
        "layer_norm": g.add("layer_norm", [x, w, b], {"normalized_shape": (33,), "eps": 1e-3}),
        "sum_last": g.add("sum", [x], {"dim": (-1,)}),
        "sum_mid": g.add("sum", [x], {"dim": (1,), "keepdim": True}),
        "mean_all": g.add("mean", [x]),
        "mean_two": g.add("mean", [x], {"dim": (1, 2), "keepdim": True}),
        "amax": g.add("amax", [x], {"dim": (-1,)}),
        "amax_mid": g.add("amax", [x], {"dim": (1,)}),
        "sum_int": g.add("sum", [i], {"dim": (1,)}),
    }
    g.set_outputs(outs)
    return g, lower(g)


@pytest.mark.parametrize("batch", [1, 5])
def test_row_kernels_match_reference(rows_graph, batch):
    g, compiled = rows_graph
    torch.manual_seed(batch)
    inputs = (torch.randn(batch, 6, 33) * 3, torch.randint(-9, 9, (batch, 6), dtype=torch.int32))
    assert_matches_reference(g, compiled, inputs)


def test_layer_norm_over_two_dims(lower):
    g = Graph("ln2")
    x = g.input("x", t(B, 4, 5))
    w, b = g.const(torch.randn(4, 5), "w"), g.const(torch.randn(4, 5), "b")
    g.set_outputs(g.add("layer_norm", [x, w, b], {"normalized_shape": (4, 5)}))
    assert_matches_reference(g, lower(g), (torch.randn(3, 4, 5),))


def test_sums_over_every_dim_but_a_block_are_row_kernels(lower):
    g = Graph("kept")
    x = g.input("x", t(B, 6, 5, 7))
    g.set_outputs({
        "channels": g.add("mean", [x], {"dim": (0, 2, 3), "keepdim": True}),
        "channels_sum": g.add("sum", [x], {"dim": (0, 2, 3)}),
        "middle": g.add("sum", [x], {"dim": (0, 3)}),
        "last": g.add("mean", [x], {"dim": (0, 1, 2)}),
    })
    compiled = lower(g)
    assert not compiled.report.fallbacks
    for batch in (1, 4):
        assert_matches_reference(g, compiled, (torch.randn(batch, 6, 5, 7) * 3 + 1,))


@pytest.mark.parametrize("dtype, ns", [("f32", (33,)), ("f64", (33,)), ("f32", (6, 33))])
def test_layer_norm_input_gradient_is_a_row_kernel(lower, dtype, ns):
    """`layer_norm_grad` from the mean and rstd a forward saved equals autograd's gradient
    of `F.layer_norm` (the catalog reference is checked against it in tests/ops)."""
    torch_dtype = {"f32": torch.float32, "f64": torch.float64}[dtype]
    stats = (B, *(6, 1)[:3 - len(ns) - 1], *(1,) * len(ns))
    g = Graph("ln_grad")
    dy, x = g.input("dy", t(B, 6, 33, dtype=dtype)), g.input("x", t(B, 6, 33, dtype=dtype))
    mean = g.input("mean", t(*stats, dtype=dtype))
    rstd = g.input("rstd", t(*stats, dtype=dtype))
    w = g.const(torch.randn(ns, dtype=torch_dtype), "w")
    g.set_outputs(g.add("layer_norm_grad", [dy, x, mean, rstd, w], {"normalized_shape": ns}))
    compiled = lower(g)
    for batch in (1, 4):
        xs = torch.randn(batch, 6, 33, dtype=torch_dtype) * 3 + 1
        _, m, r = torch.ops.aten.native_layer_norm(xs, list(ns), None, None, 1e-5)
        grad = torch.randn_like(xs)
        assert_matches_reference(g, compiled, (grad, xs, m, r), tol=1e-5 if dtype == "f32"
                                 else 1e-12)
        leaf = xs.clone().requires_grad_()
        want, = torch.autograd.grad(torch.nn.functional.layer_norm(
            leaf, ns, g.constants["w"], None, 1e-5), leaf, grad)
        torch.testing.assert_close(compiled(grad, xs, m, r), want,
                                   rtol=1e-4 if dtype == "f32" else 1e-12,
                                   atol=1e-4 if dtype == "f32" else 1e-12)


@pytest.mark.parametrize("dtype, ns", [("f32", (33,)), ("f64", (33,)), ("f32", (6, 33))])
def test_layer_norm_rstd_is_a_row_kernel(lower, dtype, ns):
    """`layer_norm_rstd` equals the rstd torch's layer norm saves, as one row kernel."""
    g = Graph("ln_rstd")
    x = g.input("x", t(B, 6, 33, dtype=dtype))
    g.set_outputs(g.add("layer_norm_rstd", [x], {"normalized_shape": ns, "eps": 1e-3}))
    compiled = lower(g)
    torch_dtype = {"f32": torch.float32, "f64": torch.float64}[dtype]
    for batch in (1, 4):
        xs = torch.randn(batch, 6, 33, dtype=torch_dtype) * 3 + 1
        assert_matches_reference(g, compiled, (xs,), tol=1e-5 if dtype == "f32" else 1e-12)
        want = torch.ops.aten.native_layer_norm(xs, list(ns), None, None, 1e-3)[2]
        torch.testing.assert_close(compiled(xs), want)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_variances_are_row_kernels(lower, dtype):
    """`var` over every dim but the channels (batch norm's), over the last dim and over the
    last two, with correction 0 and 1, equals torch.var; about its mean, so a large offset
    costs no precision."""
    g = Graph("var")
    x = g.input("x", t(B, 6, 5, 7, dtype=dtype))
    g.set_outputs({
        "channels": g.add("var", [x], {"dim": (0, 2, 3), "correction": 0}),
        "channels_unbiased": g.add("var", [x], {"dim": (0, 2, 3), "keepdim": True}),
        "last": g.add("var", [x], {"dim": (-1,), "correction": 0}),
        "last_two": g.add("var", [x], {"dim": (2, 3), "correction": 1}),
    })
    compiled = lower(g)
    assert not compiled.report.fallbacks
    torch_dtype = {"f32": torch.float32, "f64": torch.float64}[dtype]
    for batch in (1, 4):
        xs = torch.randn(batch, 6, 5, 7, dtype=torch_dtype) * 3 + 1000
        assert_matches_reference(g, compiled, (xs,), tol=1e-4 if dtype == "f32" else 1e-12)


@pytest.mark.parametrize("shape", [(8, 6), (4, 6, 9), (4, 6, 5, 7)])
def test_batch_norm_weight_gradient_is_a_row_kernel(lower, shape):
    """`batch_norm_weight_grad` from the batch mean and 1/std a training forward saved equals
    autograd's gradient of a training `F.batch_norm`'s weight, at ranks 2 to 4."""
    g = Graph("bn_wgrad")
    dy, x = g.input("dy", t(B, *shape[1:])), g.input("x", t(B, *shape[1:]))
    mean, invstd = g.input("mean", t(6)), g.input("invstd", t(6))
    g.set_outputs(g.add("batch_norm_weight_grad", [dy, x, mean, invstd]))
    compiled = lower(g)
    assert not compiled.report.fallbacks
    xs = torch.randn(shape) * 2 + 3
    _, m, r = torch.ops.aten._native_batch_norm_legit(xs, None, None, True, 0.1, 1e-5)
    grad = torch.randn(shape)
    weight = torch.ones(6, requires_grad=True)
    want, = torch.autograd.grad(torch.nn.functional.batch_norm(
        xs, None, None, weight, None, training=True, eps=1e-5), weight, grad)
    torch.testing.assert_close(compiled(grad, xs, m, r), want, rtol=1e-4, atol=1e-4)
