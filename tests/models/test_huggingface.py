"""HuggingFace `transformers` models built from small configs (random weights, no
downloads) compile with a dynamic batch and sequence length, return the model's own output
objects, and match torch eager within 1e-4 at sizes other than the example's; with the
compile cache on (as users run), in one process and across two."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

import cuvil  # noqa: E402

pytestmark = pytest.mark.slow  # each compile takes 15-30 s on two cores
TOL = 1e-4


def gpt2(use_cache: bool):
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=500,
                                     use_cache=use_cache)
    return transformers.GPT2LMHeadModel(config)


def bert():
    return transformers.BertModel(transformers.BertConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
        vocab_size=500, max_position_embeddings=64))


def distilbert():
    return transformers.DistilBertModel(transformers.DistilBertConfig(
        dim=64, n_layers=2, n_heads=2, hidden_dim=128, vocab_size=500,
        max_position_embeddings=64))


def vit():
    return transformers.ViTModel(transformers.ViTConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
        image_size=32, patch_size=8))


def tokens(batch: int, length: int) -> tuple[torch.Tensor]:
    return (torch.randint(0, 500, (batch, length)),)


def compiled(make):
    torch.manual_seed(0)
    model = make().eval()
    example = tokens(2, 7)
    return model, cuvil.compile(model, example)


def assert_matches(got, want, field: str):
    assert type(got) is type(want)
    torch.testing.assert_close(getattr(got, field), getattr(want, field), rtol=TOL, atol=TOL)


@pytest.mark.parametrize("make", [bert, distilbert], ids=["bert", "distilbert"])
def test_encoders_compile_with_dynamic_batch_and_length(make):
    model, fast = compiled(make)
    assert set(fast.graph.import_report.dynamic_dims) == {"batch", "seq"}
    for batch, length in ((2, 7), (3, 11), (1, 4)):
        args = tokens(batch, length)
        with torch.no_grad():
            want = model(*args)
        assert_matches(fast(*args), want, "last_hidden_state")


@pytest.fixture(scope="module")
def gpt2_plain():
    return compiled(lambda: gpt2(use_cache=False))


def test_gpt2_lm_head_without_cache_returns_its_output_object(gpt2_plain):
    model, fast = gpt2_plain
    for batch, length in ((2, 7), (3, 12)):
        args = tokens(batch, length)
        with torch.no_grad():
            want = model(*args)
        got = fast(*args)
        assert_matches(got, want, "logits")
        assert got.logits.shape == (batch, length, 500)


def test_gpt2_with_cache_returns_the_cache_too():
    model, fast = compiled(lambda: gpt2(use_cache=True))
    assert any("cache" in n for n in fast.graph.import_report.notes)
    args = tokens(3, 5)
    with torch.no_grad():
        want = model(*args)
    got = fast(*args)
    assert_matches(got, want, "logits")
    pairs = zip(got.past_key_values.layers, want.past_key_values.layers, strict=True)
    for mine, theirs in pairs:
        torch.testing.assert_close(mine.keys, theirs.keys, rtol=TOL, atol=TOL)
        torch.testing.assert_close(mine.values, theirs.values, rtol=TOL, atol=TOL)


def test_vit_compiles_with_a_dynamic_batch():
    torch.manual_seed(0)
    model = vit().eval()
    fast = cuvil.compile(model, (torch.randn(2, 3, 32, 32),))
    for batch in (2, 5):
        x = torch.randn(batch, 3, 32, 32)
        with torch.no_grad():
            want = model(x)
        got = fast(x)
        assert_matches(got, want, "last_hidden_state")
        assert_matches(got, want, "pooler_output")


def test_mask_code_imports_at_symbolic_dims_with_no_torch_fallback(gpt2_plain):
    _, fast = gpt2_plain
    report = fast.graph.import_report
    assert "symbolic dims: batch (input_ids dim 0), seq (input_ids dim 1)" in str(report)
    assert not report.fallbacks, report.fallbacks


def test_a_config_value_is_part_of_the_cached_program():
    """Same class, same weights, another activation: never the same cache entry."""
    outputs = []
    for act in ("gelu", "relu"):
        model, fast = compiled(lambda act=act: transformers.DistilBertModel(
            transformers.DistilBertConfig(dim=64, n_layers=1, n_heads=2, hidden_dim=128,
                                          vocab_size=500, activation=act)))
        args = tokens(2, 6)
        with torch.no_grad():
            want = model(*args)
        got = fast(*args)
        assert_matches(got, want, "last_hidden_state")
        outputs.append((got.last_hidden_state, fast.report.optimizer.cache))
    assert not torch.allclose(outputs[0][0], outputs[1][0])
    assert outputs[1][1] == "miss: program changed since the last compile of 'DistilBertModel'"


SCRIPT = textwrap.dedent("""
    import sys, torch, transformers, cuvil
    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig(
        hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=128,
        vocab_size=500, max_position_embeddings=64, hidden_dropout_prob=float(sys.argv[1])))
    model.eval()
    ids = torch.randint(0, 500, (2, 7))
    fast = cuvil.compile(model, (ids,))
    hit = fast.report.program_cache.split()[0] if fast.report.program_cache else "miss"
    err = 0.0
    for x in (ids, torch.randint(0, 500, (3, 9))):  # the example, then another shape
        with torch.no_grad():
            got, want = fast(x).last_hidden_state, model(x).last_hidden_state
        err = max(err, (got - want).abs().max().item())
    print(err, hit)
""")


def test_two_processes_share_the_cache_and_stay_correct(tmp_path):
    script = tmp_path / "bert.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "CUVIL_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    seen = []
    for dropout in ("0.1", "0.1"):
        run = subprocess.run([sys.executable, str(script), dropout], env=env, check=True,
                             capture_output=True, text=True)
        out = run.stdout.split()
        assert len(out) == 2, run.stdout + run.stderr
        seen.append((float(out[0]) <= TOL, out[1]))
    assert seen == [(True, "miss"), (True, "hit")]  # the program cache, keyed by a fake trace
