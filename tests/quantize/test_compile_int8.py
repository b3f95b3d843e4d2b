"""`cuvil.compile(..., quantize=cuvil.Quantize(...))`: calibration facts let the int8 rules
fire, extraction picks int8 where the cost model says it is cheaper, the quantized digits
models stay within 0.3 points of fp32 accuracy, and a target where int8 is dear keeps fp32
with the report saying why."""

from __future__ import annotations

import re
import shutil

import pytest
import torch

import cuvil
from cuvil.zoo import digits

pytest.importorskip("sklearn")


@pytest.fixture(scope="module", params=["mlp", "cnn"])
def trained(request):
    return digits.digits_mlp() if request.param == "mlp" else digits.digits_cnn()


def quantized(d, **options):
    """Compiled for batches of 128: at 32 the MLP's layers are too small for its int8
    kernels to pay (`bench/quantize.py --layers`), and extraction keeps them all fp32."""
    q = cuvil.Quantize(calibration=d.calibration(batches=8), **options)
    return cuvil.compile(d.model, (d.x_test[:128],), quantize=q)


@pytest.mark.parametrize("method", ["minmax", "percentile", "entropy"])
def test_int8_digits_models_keep_their_accuracy(trained, method):
    fn = quantized(trained, method=method)
    chosen = [c for c in fn.report.optimizer.precision if c.chosen == "int8"]
    assert chosen, "some layer is computed in int8"
    assert any(n.op.startswith("q") for n in fn.graph)
    accuracy = digits.accuracy(fn, trained.x_test, trained.y_test)
    assert accuracy >= trained.accuracy - 0.003, (accuracy, trained.accuracy)


def test_int8_outputs_are_close_to_fp32_logits(trained):
    fn = quantized(trained)
    x = trained.x_test[:64]
    with torch.no_grad():
        want = trained.model(x)
    got = fn(x)
    assert (got - want).abs().max() < 0.05 * want.abs().max()
    assert (got.argmax(1) == want.argmax(1)).float().mean() > 0.95


def test_where_int8_is_dearer_the_model_keeps_fp32_and_the_report_says_why(tmp_path):
    """A CPU whose int8 GEMM is slow (an older core without VNNI, say): the stock rules with
    one target parameter changed, and extraction keeps every layer in fp32."""
    from cuvil.library.loader import stock_rules_dir

    rules = tmp_path / "rules"
    shutil.copytree(stock_rules_dir(), rules)
    int8 = rules / "quantize" / "int8.cvr"
    text = int8.read_text()
    assert "target cpu(int8_gops=" in text
    int8.write_text(re.sub(r"target cpu\(int8_gops=\d+\)", "target cpu(int8_gops=1)", text))
    d = digits.digits_mlp()
    q = cuvil.Quantize(calibration=d.calibration(batches=2))
    graph = cuvil.optimize(d.model, (d.x_test[:32],), rules=rules, quantize=q)
    assert not any(n.op.startswith("q") for n in graph)
    choices = graph.report.precision
    assert choices and all(c.chosen == "fp32" for c in choices)
    assert all(c.low.cost > c.fp32.cost for c in choices)
    text = str(graph.report)
    assert "kept: int8 qlinear" in text and "is dearer" in text


def test_without_calibration_no_int8_rule_fires():
    d = digits.digits_mlp()
    graph = cuvil.optimize(d.model, (d.x_test[:8],))
    assert not graph.report.precision
    assert not any(graph.report.rules[r].fired for r in ("linear_int8", "matmul_int8"))


def test_bad_quantize_requests_are_one_line_errors():
    with pytest.raises(cuvil.CuvilError, match="method='kl' is not supported"):
        cuvil.Quantize(calibration=[], method="kl")
    with pytest.raises(cuvil.CuvilError, match="per_channel=False"):
        cuvil.Quantize(calibration=[], per_channel=False)
    with pytest.raises(cuvil.CuvilError, match="calibration needs at least one batch"):
        d = digits.digits_mlp()
        cuvil.compile(d.model, (d.x_test[:8],), quantize=cuvil.Quantize(calibration=[]))
