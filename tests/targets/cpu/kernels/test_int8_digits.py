"""The int8 kernels on real data: the digits MLP and CNN (`cuvil.zoo.digits`) run as chains
of int8 kernels (u8 activations requantized between layers, s8 per-channel weights, scales
from `cuvil.quantize`'s ranges) keep their fp32 test accuracy within one point."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("sklearn")

from cuvil.quantize import Observer, weight_range  # noqa: E402
from cuvil.targets.cpu.kernels.quantized import (  # noqa: E402
    pack_conv_weight,
    pack_weight,
    qconv2d,
    qgemm,
    quantize,
)
from cuvil.zoo import digits  # noqa: E402


def _act(values: list[torch.Tensor]) -> tuple[float, int]:
    """u8 scale and zero point of a value's min/max over the calibration batches."""
    observer = Observer("minmax")
    for v in values:
        observer.update(v)
    scale, zero = observer.range().qparams("u8")
    return float(scale), int(zero)


def _weight(w: torch.Tensor, layout) -> tuple[np.ndarray, np.ndarray]:
    """s8 per-output-channel weight, symmetric."""
    scale, _ = weight_range(w, axis=0).qparams("i8")
    shape = (-1,) + (1,) * (w.dim() - 1)
    q = torch.clamp(torch.round(w / scale.reshape(shape)), -127, 127).to(torch.int8)
    return layout(q.numpy()), scale.numpy().astype(np.float32)


def _b(layer) -> np.ndarray:
    return layer.bias.detach().numpy()


def test_mlp_as_int8_chain_keeps_accuracy():
    d = digits.digits_mlp()
    m = d.model
    with torch.no_grad():
        xs = [b[0] for b in d.calibration()]
        h1 = [torch.relu(m.fc1(x)) for x in xs]
        h2 = [torch.relu(m.fc2(h)) for h in h1]
    (sx, zx), (s1, z1), (s2, z2) = _act(xs), _act(h1), _act(h2)
    layers = [pack_weight(*_weight(fc.weight.detach(), np.transpose))
              for fc in (m.fc1, m.fc2, m.fc3)]

    def run(x: torch.Tensor) -> np.ndarray:
        q = quantize(x.numpy(), sx, zx)
        q = qgemm(q, sx, zx, layers[0], _b(m.fc1), relu=True, out_scale=s1, out_zero=z1)
        q = qgemm(q, s1, z1, layers[1], _b(m.fc2), relu=True, out_scale=s2, out_zero=z2)
        return qgemm(q, s2, z2, layers[2], _b(m.fc3))

    acc = digits.accuracy(run, d.x_test, d.y_test)
    assert acc >= d.accuracy - 0.01, (acc, d.accuracy)


def test_cnn_convolutions_in_int8_keep_accuracy():
    d = digits.digits_cnn()
    m = d.model
    with torch.no_grad():
        xs = [b[0] for b in d.calibration()]
        c1 = [torch.relu(m.conv1(x)) for x in xs]
    (sx, zx), (s1, z1) = _act(xs), _act(c1)
    w1, w2 = (pack_conv_weight(*_weight(c.weight.detach(), lambda a: a))
              for c in (m.conv1, m.conv2))

    def run(x: torch.Tensor) -> torch.Tensor:
        q = quantize(x.numpy().reshape(len(x), -1), sx, zx).reshape(x.shape)
        q = qconv2d(q, sx, zx, w1, _b(m.conv1), padding=1, relu=True, out_scale=s1,
                    out_zero=z1)
        y = qconv2d(q, s1, z1, w2, _b(m.conv2), padding=1, relu=True)
        return m.head(torch.flatten(m.pool(torch.from_numpy(y)), 1))

    acc = digits.accuracy(run, d.x_test, d.y_test)
    assert acc >= d.accuracy - 0.01, (acc, d.accuracy)
