"""Every CUDA template on random tiny shapes (hypothesis) against the reference executor,
under the CUDA simulator: each graph computes on `cuda` between two transfers, must be
lowered by the template's CUDA kernel with no fallback, and match `cuvil.run`. Shapes stay
at 8 or less per dim (the simulator runs every thread in Python); a few examples each."""

from __future__ import annotations

import torch
from cuda_support import check, on_cuda, stock_ops
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cuvil.ir import TensorType
from cuvil.targets.cpu.target import GENERATORS as CPU_GENERATORS
from cuvil.targets.cuda.target import GENERATORS, WITHOUT_KERNEL

FEW = settings(max_examples=5)
dim = st.integers(1, 6)


def shape(rank_lo: int = 1, rank_hi: int = 3):
    return st.lists(dim, min_size=rank_lo, max_size=rank_hi).map(tuple)


def ints(shape, high: int, seed: int = 0, low: int = 0):
    return torch.randint(low, high, shape, generator=torch.Generator().manual_seed(seed))


def randn(*shapes):
    return [torch.randn(*s, generator=torch.Generator().manual_seed(i))
            for i, s in enumerate(shapes)]


def test_cuda_has_every_cpu_family_or_says_why_not():
    assert set(CPU_GENERATORS) <= set(GENERATORS)
    assert set(WITHOUT_KERNEL) == {"qgemm", "qconv"}


@FEW
@given(shape())
def test_elementwise(lower, s):
    shapes = [s, s[-1:]]
    check(on_cuda(shapes, lambda g, x, b: g.add("tanh", [g.add("add", [
        g.add("mul", [g.add("relu", [x]), b]), g.scalar(1.0)])])), shapes, lower,
        {"elementwise"})


@FEW
@given(st.lists(st.integers(1, 8), min_size=3, max_size=3), st.booleans())
def test_gemm_with_epilogue(lower, mkn, relu):
    m, k, n = mkn
    shapes = [(m, k), (k, n), (n,)]

    def build(g, x, w, b):
        y = g.add("add", [g.add("matmul", [x, w]), b])
        return g.add("relu", [y]) if relu else y

    check(on_cuda(shapes, build), shapes, lower, {"gemm"})


ROW_OPS = {"softmax": {"dim": -1}, "log_softmax": {"dim": -1},
           "sum": {"dim": [-1], "keepdim": True}, "mean": {"dim": [-1], "keepdim": False},
           "amax": {"dim": [-1], "keepdim": True}}


@FEW
@given(st.sampled_from(sorted(ROW_OPS) + ["layer_norm"]), shape(2, 3))
def test_rows(lower, op, s):
    if op == "layer_norm":
        shapes = [s, s[-1:], s[-1:]]
        build = lambda g, x, w, b: g.add(op, [x, w, b], {  # noqa: E731
            "normalized_shape": [s[-1]], "eps": 1e-5})
    else:
        shapes = [s]
        build = lambda g, x: g.add(op, [x], ROW_OPS[op])  # noqa: E731
    check(on_cuda(shapes, build), shapes, lower, {"rows"})


@st.composite
def conv_cases(draw):
    """(x shape, w shape, attrs) of a valid convolution: plain, grouped or depthwise."""
    groups = draw(st.sampled_from([1, 2]))
    cin, cout = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    pad, stride = draw(st.integers(0, 1)), draw(st.integers(1, 2))
    h, w = draw(st.integers(kh, 6)), draw(st.integers(kw, 6))
    attrs = {"stride": [stride, stride], "padding": [pad, pad], "dilation": [1, 1],
             "groups": groups}
    return (draw(st.integers(1, 2)), cin, h, w), (cout, cin // groups, kh, kw), attrs


@FEW
@given(conv_cases(), st.booleans())
def test_conv_with_bias_and_activation(lower, case, relu):
    x, w, attrs = case
    shapes = [x, w, (1, w[0], 1, 1)]

    def build(g, x, w, b):
        y = g.add("add", [g.add("conv2d", [x, w], attrs), b])
        return g.add("relu", [y]) if relu else y

    check(on_cuda(shapes, build), shapes, lower, {"conv"})


POOLS = {"max_pool2d": {"stride": [], "padding": [0, 0]},
         "avg_pool2d": {"stride": [], "padding": [0, 0]},
         "adaptive_avg_pool2d": {}}


@FEW
@given(st.sampled_from(sorted(POOLS)), st.integers(1, 3), shape(4, 4))
def test_pool(lower, op, k, s):
    s = (*s[:2], s[2] + 2, s[3] + 2)
    attrs = ({"output_size": [k, k]} if op.startswith("adaptive")
             else {"kernel_size": [k, k], **POOLS[op]})
    check(on_cuda([s], lambda g, x: g.add(op, [x], attrs)), [s], lower, {"pool"})


@FEW
@given(st.integers(1, 2), st.integers(1, 4), st.integers(1, 4), st.integers(1, 4),
       st.booleans())
def test_attention(lower, heads, q_len, k_len, d, causal):
    shapes = [(1, heads, q_len, d), (1, heads, k_len, d), (1, heads, k_len, d)]
    attrs = {"is_causal": causal, "scale": None}
    check(on_cuda(shapes, lambda g, *qkv: g.add("scaled_dot_product_attention", list(qkv),
                                                attrs)), shapes, lower, {"attention"})


@FEW
@given(st.sampled_from([("lstm_layer", 4, 2), ("gru_layer", 3, 1)]),
       st.lists(st.integers(1, 3), min_size=4, max_size=4), st.booleans())
def test_recurrent(lower, layer, sizes, reverse):
    (op, gates, states), (steps, batch, inputs, hidden) = layer, sizes
    shapes = [(steps, batch, inputs), *[(batch, hidden)] * states, (gates * hidden, inputs),
              (gates * hidden, hidden), (gates * hidden,), (gates * hidden,)]
    g = on_cuda(shapes, lambda g, *xs: g.add(op, list(xs), {"reverse": reverse}))
    check(g, shapes, lower, {"recurrent"})


@FEW
@given(shape(1, 3), st.lists(dim, min_size=1, max_size=3), st.data())
def test_concat(lower, s, extents, data):
    d = data.draw(st.integers(0, len(s) - 1))
    shapes = [(*s[:d], e, *s[d + 1:]) for e in extents]
    check(on_cuda(shapes, lambda g, *xs: g.add("cat", list(xs), {"dim": d})), shapes, lower,
          {"concat"})


@FEW
@given(st.integers(1, 6), st.integers(1, 4), shape(1, 2))
def test_embedding(lower, rows, width, picked):
    shapes = [(rows, width), picked]
    g = on_cuda(shapes, lambda g, w, i: g.add("embedding", [w, i]), dtypes=["f32", "i64"])
    check(g, shapes, lower, {"gather"}, inputs=[*randn(shapes[0]), ints(picked, rows)])


@FEW
@given(st.integers(1, 8), st.sampled_from([(0, 1), (1.5, 0.5), (-2, 3)]),
       st.sampled_from(["f32", "i64"]))
def test_arange(lower, n, start_step, dtype):
    """`arange` typed on cuda (the source template), read by an elementwise kernel."""
    start, step = start_step if dtype == "f32" else (int(start_step[0]), int(start_step[1]))
    attrs = {"shape": (n,), "start": start, "step": step, "dtype": dtype}

    def build(g, x):
        r = g.add("arange", [], attrs, type=TensorType((n,), dtype, "", "cuda"))
        return g.add("add", [x, r])

    check(on_cuda([(n,)], build, dtypes=[dtype]), [(n,)], lower, {"source"},
          inputs=[ints((n,), 9).to(torch.float32 if dtype == "f32" else torch.int64)])


@FEW
@given(st.sampled_from(["cumsum", "diff"]), shape(1, 3), st.sampled_from(["f32", "i64"]),
       st.data())
def test_scan(lower, op, s, dtype, data):
    d = data.draw(st.integers(-len(s), len(s) - 1))
    g = on_cuda([s], lambda g, x: g.add(op, [x], {"dim": d}), dtypes=[dtype])
    x = randn(s)[0] if dtype == "f32" else ints(s, 9, low=-9)
    check(g, [s], lower, {"scan"}, inputs=[x])


@FEW
@given(shape(1, 3), shape(1, 2), st.data())
def test_index(lower, s, picked, data):
    """x[:, ..., i] from dim `start`, negative indices included."""
    start = data.draw(st.integers(0, len(s) - 1))
    g = on_cuda([s, picked], lambda g, x, i: g.add("index", [x, i], {"start": start}),
                dtypes=["f32", "i64"])
    index = ints(picked, s[start], low=-s[start])
    check(g, [s, picked], lower, {"index"}, inputs=[*randn(s), index])


@FEW
@given(shape(1, 3), st.data())
def test_gather(lower, s, data):
    d = data.draw(st.integers(0, len(s) - 1))
    picked = tuple(data.draw(st.integers(1, n)) if k != d else data.draw(dim)
                   for k, n in enumerate(s))
    g = on_cuda([s, picked], lambda g, x, i: g.add("gather", [x, i], {"dim": d}),
                dtypes=["f32", "i64"])
    check(g, [s, picked], lower, {"index"}, inputs=[*randn(s), ints(picked, s[d])])


@FEW
@given(st.lists(st.integers(1, 8), min_size=4, max_size=4), st.booleans(), shape(1, 2))
def test_mlp(lower, widths, head, lead):
    """`mlp_relu` (two layers) or `mlp_relu_relu_linear` (three), one kernel."""
    n_in, hid, hid2, n_out = widths
    layers = [(n_in, hid), (hid, hid2 if head else n_out)] + ([(hid2, n_out)] if head else [])
    shapes = [(*lead, n_in)] + [s for k, n in layers for s in ((k, n), (n,))]
    op = "mlp_relu_relu_linear" if head else "mlp_relu"
    g = on_cuda(shapes, lambda g, *xs: g.add(op, list(xs)), defs=stock_ops())
    compiled = check(g, shapes, lower, {"mlp"})
    assert [k.template for k in compiled.report.kernels] == ["transfer", "mlp"]


@FEW
@given(conv_cases(), st.integers(1, 2))
def test_conv_relu_max_pool_is_one_kernel(lower, case, k):
    """`conv2d_bias_relu_max_pool` (the fused op of `rules/fusion/conv.cvr`): the pool runs
    in the convolution's kernel."""
    x, w, attrs = case
    (p, _), (st_, _) = attrs["padding"], attrs["stride"]
    assume(min(x[2] + 2 * p - w[2], x[3] + 2 * p - w[3]) // st_ + 1 >= k)
    shapes = [x, w, (w[0], 1, 1)]
    fused = {**attrs, "kernel_size": [k, k], "pool_stride": [1, 1], "pool_padding": [0, 0]}
    g = on_cuda(shapes, lambda g, x, w, b: g.add("conv2d_bias_relu_max_pool", [x, w, b],
                                                 fused), defs=stock_ops())
    compiled = check(g, shapes, lower, {"conv"})
    assert "pool" not in {k.template for k in compiled.report.kernels}


@FEW
@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 4))
def test_move_chain_is_one_copy(lower, heads, rows, width):
    """transpose -> view -> select -> transpose (heads split off a fused projection): one
    copy kernel."""
    s = (rows, 3 * heads * width)

    def build(g, x):
        t = g.add("reshape", [x], {"shape": [rows, 3, heads, width]})
        picked = g.add("select", [g.add("transpose", [t], {"dim0": 0, "dim1": 1})],
                       {"dim": 0, "index": 1})
        return g.add("transpose", [picked], {"dim0": 0, "dim1": 1})

    compiled = check(on_cuda([s], build), [s], lower, {"elementwise"})
    assert [k.template for k in compiled.report.steps] == ["transfer", "elementwise",
                                                           "transfer"]


@FEW
@given(st.integers(1, 6), st.integers(1, 6), st.sampled_from(["mv", "vm", "vv"]))
def test_vector_products(lower, m, k, kind):
    shapes = {"mv": [(m, k), (k,)], "vm": [(k,), (k, m)], "vv": [(k,), (k,)]}[kind]
    check(on_cuda(shapes, lambda g, x, w: g.add("matmul", [x, w])), shapes, lower, {"gemm"})


@FEW
@given(st.sampled_from(["sum", "mean", "amax"]), shape(1, 3), st.booleans(), st.data())
def test_reduction_over_any_dims(lower, op, s, keep, data):
    dims = data.draw(st.lists(st.integers(0, len(s) - 1), min_size=1, unique=True))
    g = on_cuda([s], lambda g, x: g.add(op, [x], {"dim": dims, "keepdim": keep}))
    check(g, [s], lower, {"rows"})


@FEW
@given(st.sampled_from(["softmax", "log_softmax"]), shape(2, 3), st.data())
def test_softmax_along_any_dim(lower, op, s, data):
    d = data.draw(st.integers(0, len(s) - 2))
    check(on_cuda([s], lambda g, x: g.add(op, [x], {"dim": d})), [s], lower, {"rows"})


def test_zero_dim_elementwise(lower):
    check(on_cuda([()], lambda g, x: g.add("exp", [g.add("neg", [x])])), [()], lower,
          {"elementwise"}, inputs=[torch.tensor(0.5)])
