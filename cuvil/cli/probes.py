"""Probe models: small models with the forms the zoo lacks, one per rule family.

`cuvil rules coverage` runs them with the zoo so that every stock rule has something to
fire on: a layer norm or softmax written out op by op, attention written out, convolutions
with batch norm, bias and activations, linear layers with every epilogue, elementwise
chains, identities, shape chains, conversions. `PROBES[name]()` returns `(model,
example_inputs)` like a zoo factory. Most are `nn.Module`s, imported like any model; the
forms the importer never writes (a device round trip, a layout conversion, a scalar as
first operand) are Cuvil graphs built directly. Weights are seeded: every run sees the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from cuvil.errors import CuvilError


def _seeded(seed: int = 0) -> torch.Generator:
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


class LayerNormDecomposed(nn.Module):
    """layer norm written out twice: with `/ sqrt(...)` and with `* rsqrt(...)`."""

    def __init__(self, d: int = 16):
        super().__init__()
        self.g, self.b = nn.Parameter(torch.randn(d)), nn.Parameter(torch.randn(d))

    def forward(self, x):
        c = x - x.mean(-1, keepdim=True)
        var = (c ** 2).mean(-1, keepdim=True)
        y = c / torch.sqrt(var + 1e-5) * self.g + self.b
        z = c * torch.rsqrt(var + 1e-5) * self.g + self.b
        return y, z


class SoftmaxDecomposed(nn.Module):
    """softmax written out (with and without the max), and log-softmax."""

    def forward(self, x):
        e = torch.exp(x - x.amax(-1, keepdim=True))
        naive = torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)
        log = x - torch.log(torch.exp(x).sum(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True), naive, log


class AttentionWrittenOut(nn.Module):
    """softmax(q @ k^T * s [+ mask | masked with -inf]) @ v, three ways."""

    def forward(self, q, k, v, mask):
        scores = q @ k.transpose(-2, -1) * 0.125
        plain = torch.softmax(scores, dim=-1) @ v
        additive = torch.softmax(scores + mask, dim=-1) @ v
        hidden = torch.softmax(scores.masked_fill(mask < -1.0, float("-inf")), dim=-1) @ v
        return plain, additive, hidden


class ConvBatchNorm(nn.Module):
    """conv + batch norm (with and without a conv bias), then bias + relu / relu6; 32
    channels, enough for the NHWC layout rules."""

    def __init__(self, c: int = 32):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(c)
        self.conv3 = nn.Conv2d(c, c, 1)
        for bn in (self.bn1, self.bn2):
            bn.running_mean.normal_()
            bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        y = self.bn1(self.conv1(x))
        y = torch.relu(self.bn2(self.conv2(y)))
        y = nn.functional.relu6(self.conv3(y))
        y = nn.functional.max_pool2d(y, 2)
        return nn.functional.adaptive_avg_pool2d(y + 1.0, 1)


class LinearEpilogues(nn.Module):
    """linear layers ending in relu, gelu (both forms; one viewed to another shape first),
    silu, and residual adds."""

    def __init__(self, d: int = 16):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.l4, self.l5 = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        y = torch.relu(self.l1(x))
        y = nn.functional.gelu(self.l2(y)) + nn.functional.gelu(self.l2(y), approximate="tanh")
        y = nn.functional.gelu(self.l2(y).view(-1, 4, 4), approximate="tanh").view(-1, 16)
        y = nn.functional.silu(self.l3(y))
        y = self.l4(y) + x
        return x + self.l5(y)


class TrainingProducts(nn.Module):
    """What an MLP's training graphs compute, its weights inputs (AOTAutograd lifts them):
    relu(x @ w1^T + b1), `F.linear` (its transpose of dims -2 and -1), ReLU's gradient after
    the product that computes it, weight gradients g^T @ x (`permute` too), a^T @ e^T, and a
    3-d layer's product viewed back to 3-d before its ReLU."""

    def forward(self, x, w1, b1, w2, b2, g, e):
        h = torch.relu(x @ w1.t() + b1)
        out = nn.functional.linear(h, w2, b2)
        dh = torch.ops.aten.threshold_backward(g @ w2, h, 0.0)
        h3 = torch.relu((x @ w2[:, :16].t() + b2).view(2, 2, 10))
        return out, dh.t() @ x, x.permute(1, 0) @ dh, x.t() @ e.t(), h3


class ElementwiseChains(nn.Module):
    """activations written as chains: x * sigmoid(x), hardtanh(0, 6), clamp(min=0), h-swish
    and h-sigmoid through relu6, and GPT-2's tanh GELU as HuggingFace writes it
    (`NewGELUActivation`)."""

    def forward(self, x):
        a = x * torch.sigmoid(x) + torch.sigmoid(x) * x
        b = nn.functional.hardtanh(a, 0.0, 6.0)
        c = torch.clamp(b, min=0.0)
        c = c * nn.functional.relu6(c + 3.0) / 6.0 + nn.functional.relu6(a + 3.0) / 6.0
        return 0.5 * c * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (c + 0.044715 *
                                                                        torch.pow(c, 3.0))))


class Identities(nn.Module):
    """arithmetic that does nothing, and constants that gather."""

    def forward(self, x):
        y = ((x * 1.0 + 0.0) - 0.0) / 1.0
        y = torch.relu(torch.relu(torch.neg(torch.neg(y))))
        y = nn.functional.dropout(y, 0.1, training=False)
        return (y * 2.0) * 3.0 + (y + 2.0) + 3.0


class ShapeChains(nn.Module):
    """transposes and permutes that cancel (attention's heads out of its positions and back
    among them), reshape and view chains, a reshape to the same shape."""

    def forward(self, x):
        a = x.transpose(0, 1).transpose(0, 1) + x.transpose(1, 2).transpose(2, 1)
        b = a.reshape(4, -1).reshape(2, 2, -1).view(-1).reshape(2, 8, 3)
        y = x.reshape(2, 2, 4, 3)
        p = (y.permute(0, 2, 3, 1).permute(0, 3, 1, 2) + y.permute(0, 3, 1, 2).permute(0, 2, 3, 1)
             + y.permute(0, 2, 1, 3).permute(0, 2, 1, 3)
             + y.permute(1, 2, 0, 3).permute(2, 0, 1, 3)
             + y.permute(2, 0, 1, 3).permute(1, 2, 0, 3))
        return b.reshape(2, 8, 3) + x.view(48).reshape(2, 8, 3) + p.reshape(2, 8, 3)


class CastChains(nn.Module):
    """f32 -> f64 -> f32."""

    def forward(self, x):
        return x.double().float() * 2.0


def _graph_probe(name: str, shape: tuple[int, ...], build: Callable) -> tuple[Any, tuple]:
    from cuvil.ir import Graph, TensorType

    g = Graph(name)
    x = g.input("x", TensorType(shape, "f32"))
    g.set_outputs(build(g, x))
    return g, (torch.randn(*shape, generator=_seeded()),)


def conversions() -> tuple[Any, tuple]:
    """Conversions that cancel or do nothing (torch cannot write them: a graph)."""

    def build(g, x):
        nhwc = g.add("to_layout", [g.add("to_layout", [x], {"layout": "NHWC"})],
                     {"layout": "NCHW"})
        same = g.add("to_layout", [x], {"layout": "NCHW"})
        cuda = g.add("to_device", [g.add("to_device", [x], {"device": "cuda"})],
                     {"device": "cpu"})
        here = g.add("to_device", [x], {"device": "cpu"})
        cast = g.add("cast", [x], {"dtype": "f32"})
        q = g.add("quantize", [x], {"scale": 0.1, "dtype": "i8"})
        back = g.add("dequantize", [q], {"scale": 0.1})
        requant = g.add("quantize", [back], {"scale": 0.1, "dtype": "i8"})
        total = [nhwc, same, cuda, here, cast, g.add("cast", [requant], {"dtype": "f32"})]
        out = total[0]
        for value in total[1:]:
            out = g.add("add", [out, value])
        return out

    return _graph_probe("conversions", (2, 8, 4, 4), build)


def direct_forms() -> tuple[Any, tuple]:
    """Forms the importer never writes: a constant first (`1 * x`, `0 + x`; torch puts x
    first) and `hardtanh(x, 0, 6)` (imported as relu6 already)."""

    def build(g, x):
        y = g.add("mul", [g.scalar(1.0), x])
        y = g.add("add", [g.scalar(0.0), y])
        return g.add("hardtanh", [y], {"min_val": 0.0, "max_val": 6.0})

    return _graph_probe("direct_forms", (4, 8), build)


class Int8Candidates(nn.Module):
    """A convolution (+ relu), linear layers (+ relu) and a bare matmul, calibrated below:
    the forms the int8 rules rewrite."""

    def __init__(self, c: int = 8, d: int = 32):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)
        self.fc1, self.fc2 = nn.Linear(c * 16, d), nn.Linear(d, d)
        self.w = nn.Parameter(torch.randn(d, d))

    def forward(self, x):
        y = self.conv2(torch.relu(self.conv1(x))).flatten(1)
        return torch.relu(self.fc1(y)) @ self.w + self.fc2(torch.relu(self.fc1(y)))


def int8_candidates() -> tuple[Any, tuple]:
    """`Int8Candidates` imported and calibrated (a graph with facts: the int8 rules fire
    only on calibrated values)."""
    from cuvil.frontend import from_torch
    from cuvil.quantize import Quantize

    model, x = Int8Candidates().eval(), _randn(2, 8, 4, 4)
    graph = Quantize(calibration=[(x,), (x * 0.5,)]).annotate(from_torch(model, (x,)))
    return graph, (x,)


class Fp16Candidates(nn.Module):
    """Convolutions (bias; + relu; + relu and a max pool), linear layers (+ relu) and a bare
    matmul, each reading the one before; and casts to f16 and back around relu, a max
    pool and nothing: the forms the fp16 rules of `targets/cuda/fp16.cvr` rewrite."""

    def __init__(self, c: int = 4, d: int = 16):
        super().__init__()
        self.conv1, self.conv2, self.conv3 = (nn.Conv2d(c, c, 3, padding=1) for _ in range(3))
        self.fc1, self.fc2 = nn.Linear(c * 4, d), nn.Linear(d, d)
        self.w = nn.Parameter(torch.randn(d, d))

    def forward(self, x):
        y = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        h = torch.relu(self.fc1(self.conv3(nn.functional.max_pool2d(y, 2)).flatten(1)))
        q, dims = x.half(), (1, 2, 3)
        pooled = nn.functional.max_pool2d(q.float(), 2)
        return (self.fc2(h) + h @ self.w).sum(1) + torch.relu(q.float()).sum(dims) + \
            pooled.sum(dims) + q.float().half().float().sum(dims)


def fp16_candidates() -> tuple[Any, tuple]:
    """`Fp16Candidates` imported, marked for fp16 and placed on cuda (the fp16 rules fire
    only on `half_ok` values the GPU computes)."""
    from cuvil.frontend import from_torch
    from cuvil.ir.place import place_on
    from cuvil.quantize import Quantize

    model, x = Fp16Candidates().eval(), _randn(2, 4, 4, 4)
    return place_on(Quantize(activations="fp16").annotate(from_torch(model, (x,))), "cuda"), (x,)


class PlacementCandidates(nn.Module):
    """Products large enough to pay for the host link, with what follows them on the GPU:
    a linear layer, two products added, relu and gelu, softmax, layer norm, a batched
    product. Optimized for `["cuda", "cpu"]` (`TARGETS`), the placement rules fire."""

    def __init__(self, d: int = 512):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.w1, self.w2 = nn.Parameter(torch.randn(d, d)), nn.Parameter(torch.randn(d, d))
        self.norm = nn.LayerNorm(d)

    def forward(self, x, y):
        h = torch.relu(self.fc(x))
        s = nn.functional.gelu(h @ self.w1 + x @ self.w2)
        p = torch.softmax(s, dim=-1) + self.norm(s)
        return p, torch.bmm(y, y.transpose(1, 2))


class PlacementCnn(nn.Module):
    """A convolution, the three poolings and attention, for the placement rules of the ops
    the CUDA target also lowers (`conv`, `pool`, `attention`)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, padding=1, bias=False)

    def forward(self, x, q):
        h = nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        h = nn.functional.adaptive_avg_pool2d(nn.functional.avg_pool2d(h, 2), 1)
        return h, nn.functional.scaled_dot_product_attention(q, q, q)


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=_seeded(1))


PROBES: dict[str, Callable[[], tuple[Any, tuple]]] = {
    "layer_norm": lambda: (LayerNormDecomposed().eval(), (_randn(2, 4, 16),)),
    "softmax": lambda: (SoftmaxDecomposed().eval(), (_randn(2, 4, 16),)),
    "attention": lambda: (AttentionWrittenOut().eval(),
                          (_randn(2, 2, 8, 16), _randn(2, 2, 8, 16), _randn(2, 2, 8, 16),
                           _randn(8, 8))),  # a (length, length) mask
    "conv_batch_norm": lambda: (ConvBatchNorm().eval(), (_randn(2, 32, 8, 8),)),
    "linear_epilogues": lambda: (LinearEpilogues().eval(), (_randn(4, 16),)),
    "training_products": lambda: (TrainingProducts(), (
        _randn(4, 16), _randn(32, 16), _randn(32), _randn(10, 32), _randn(10), _randn(4, 10),
        _randn(6, 4))),
    "elementwise": lambda: (ElementwiseChains().eval(), (_randn(4, 16),)),
    "identities": lambda: (Identities().eval(), (_randn(4, 16),)),
    "shapes": lambda: (ShapeChains().eval(), (_randn(2, 8, 3),)),
    "casts": lambda: (CastChains().eval(), (_randn(4, 16),)),
    "conversions": conversions,
    "direct_forms": direct_forms,
    "int8": int8_candidates,
    "fp16": fp16_candidates,
    "placement": lambda: (PlacementCandidates().eval(), (_randn(256, 512), _randn(4, 128, 512))),
    "placement_cnn": lambda: (PlacementCnn().eval(), (_randn(2, 8, 16, 16),
                                                      _randn(2, 2, 16, 8))),
}

# The targets a probe is optimized for, when not the CPU alone.
TARGETS: dict[str, tuple[str, ...]] = {"placement": ("cuda", "cpu"),
                                        "placement_cnn": ("cuda", "cpu"),
                                        "fp16": ("cuda", "cpu")}


def get(name: str) -> tuple[Any, tuple]:
    if name not in PROBES:
        raise CuvilError(f"no probe model {name!r}; known: {', '.join(PROBES)}")
    _seeded()
    return PROBES[name]()
