"""Calibration against hand-computed ranges: min/max over batches, the percentile of |x|,
the entropy threshold ignoring a far outlier, per-channel weight ranges, and the scales and
zero points they give (checked by quantizing with torch)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import cuvil
from cuvil.errors import CuvilError
from cuvil.quantize import Observer, calibrate, weight_range

# torch's quantized tensors (the reference here) warn that they are deprecated
pytestmark = pytest.mark.filterwarnings("ignore:torch.quantize_per:UserWarning")


class Net(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x * 2.0) - 1.0


@pytest.fixture(scope="module")
def graph():
    return cuvil.from_torch(Net(), (torch.randn(4, 8),))


def test_minmax_is_the_smallest_and_largest_value_over_all_batches(graph):
    batches = [torch.tensor([[-3.0] * 8, [1.0] * 8]), torch.tensor([[0.5] * 8, [5.0] * 8])]
    ranges = calibrate(graph, batches)
    (x,) = graph.inputs
    assert (ranges[x].lo.item(), ranges[x].hi.item()) == (-3.0, 5.0)
    out = graph.outputs[0]
    assert (ranges[out].lo.item(), ranges[out].hi.item()) == (-1.0, 9.0)  # relu(2x) - 1


def test_percentile_reads_the_percentile_of_abs_values(graph):
    torch.manual_seed(0)
    batches = [torch.randn(64, 8) for _ in range(4)]
    (x,) = graph.inputs
    got = calibrate(graph, batches, "percentile", percentile=99.0)[x].hi.item()
    want = np.percentile(torch.cat(batches).abs().numpy(), 99.0, method="inverted_cdf")
    top = max(b.abs().max().item() for b in batches)
    assert abs(got - want) <= 2 * top / 2048  # within a bin or two of the histogram


def test_entropy_clips_a_far_outlier():
    observer = Observer("entropy")
    torch.manual_seed(0)
    for _ in range(4):
        observer.update(torch.rand(10_000) * 2 - 1)  # mass in [-1, 1]
    observer.update(torch.tensor([100.0]))  # one value a hundred times further out
    threshold = observer.range().hi.item()
    bin_width = 100.0 / 2048
    assert 0.9 <= threshold <= 128 * bin_width + 1e-6, threshold  # the narrowest candidate


def test_per_channel_weight_ranges_and_symmetric_int8_scales():
    w = torch.tensor([[1.0, -4.0], [0.5, 0.25], [0.0, 0.0]])
    r = weight_range(w, axis=0)
    assert r.absmax.tolist() == [4.0, 0.5, 0.0]
    scale, zero = r.qparams("i8")
    assert torch.allclose(scale, torch.tensor([4 / 127, 0.5 / 127, 1.0]))
    assert zero.tolist() == [0, 0, 0]
    q = torch.quantize_per_channel(w, scale.double(), zero, 0, torch.qint8)
    torch.testing.assert_close(q.dequantize(), w, atol=float(scale.max()) / 2, rtol=0)


def test_affine_uint8_maps_the_range_onto_0_255_with_zero_exact():
    r = weight_range(torch.tensor([-1.0, 3.0]), axis=None)
    scale, zero = r.qparams("u8")
    assert scale.item() == pytest.approx(4 / 255) and zero.item() == round(255 / 4)
    q = torch.quantize_per_tensor(torch.tensor([-1.0, 0.0, 3.0]), scale.item(), zero.item(),
                                  torch.quint8)
    assert q.int_repr().tolist() == [0, zero.item(), 255]
    assert q.dequantize()[1].item() == 0.0


def test_bad_requests_are_clear_errors(graph):
    with pytest.raises(CuvilError, match="unknown calibration method 'kl'"):
        calibrate(graph, [torch.randn(2, 8)], "kl")
    with pytest.raises(CuvilError, match="at least one batch"):
        calibrate(graph, [])
    with pytest.raises(CuvilError, match="cannot quantize to 'i4'"):
        weight_range(torch.ones(2)).qparams("i4")
