"""The program cache: a warm compile rebuilds the callable from the stored program without
importing the IR (sympy), and computes what torch eager does at every batch size; any
change to the model, the rules or the options misses; a damaged entry is a miss, written
again; ops run through torch are stored as plain calls; what the entry cannot hold (the
model's own output containers) is never stored."""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import cuvil
from cuvil.cache import programs, tensor_entry


class Block(nn.Module):
    def __init__(self, seed: int = 0, k: float = 2.0):
        super().__init__()
        torch.manual_seed(seed)
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 4)
        self.k = k

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x))) * self.k, x.sum(1)


def eager(model, x):
    with torch.no_grad():
        return model.eval()(x)


def entries(cache) -> list:
    return sorted(cache.glob("programs/*.cvp"))


def test_a_second_compile_is_the_stored_program_and_computes_what_eager_does(fresh_cache):
    first = cuvil.compile(Block(), (torch.randn(4, 8),))
    assert first.report.program_cache == "" and len(entries(fresh_cache)) == 1
    model = Block()
    again = cuvil.compile(model, (torch.randn(4, 8),))
    assert again.report.program_cache.startswith("hit")
    for batch in (4, 1, 7):  # the batch dim stays symbolic
        x = torch.randn(batch, 8)
        torch.testing.assert_close(again(x), eager(model, x))
    with pytest.raises(cuvil.CuvilError, match=r"input 'x': expected shape \[batch, 8\]"):
        again(torch.randn(4, 9))
    assert again.graph.name == first.graph.name  # compiled the slow way, on first use
    assert again.report.graph.to_text() == first.report.graph.to_text()  # the optimized one
    assert again.source == first.source
    x = torch.randn(2, 8)
    torch.testing.assert_close(again.profile((x,), runs=2).outputs, eager(model, x))


class FusedAttention(nn.Module):
    """GPT-2's attention: one qkv layer, heads split from its slices and merged after; the
    stored program's buffer plan must keep the qkv output alive while attention reads
    its heads in place (`cuvil/targets/cpu/templates/heads.py`)."""

    def __init__(self, dim: int = 24, heads: int = 3):
        super().__init__()
        torch.manual_seed(0)
        self.qkv, self.proj, self.heads = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim), heads

    def forward(self, x):
        b, n, c = x.shape
        h, d = self.qkv(x), c // self.heads  # sliced, not split: torch.fx traces slices
        q = h[:, :, :c].view(b, n, self.heads, d).transpose(1, 2)
        k = h[:, :, c:2 * c].view(b, n, self.heads, d).transpose(1, 2)
        v = h[:, :, 2 * c:].view(b, n, self.heads, d).transpose(1, 2)
        a = nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(a.transpose(1, 2).reshape(b, n, c))


def test_a_stored_program_reads_attention_heads_in_place_correctly(fresh_cache):
    cuvil.compile(FusedAttention(), (torch.randn(2, 10, 24),))
    model = FusedAttention()
    again = cuvil.compile(model, (torch.randn(2, 10, 24),))
    assert again.report.program_cache.startswith("hit")
    assert "(heads in place)" in again.source and "_copy" not in again.source
    for batch in (2, 5):
        x = torch.randn(batch, 10, 24)
        torch.testing.assert_close(again(x), eager(model, x), atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("change", [
    lambda: (Block(seed=1), {}),  # other weights
    lambda: (Block(k=3.0), {}),  # a Python attribute read in forward
    lambda: (Block(), {"fuse_elementwise": False}),  # an option
    lambda: (Block(), {"threads": 1}),  # the thread count
    lambda: (Block(), {"disable": ("matmul_add",)}),  # the rules
])
def test_a_change_misses_and_computes_the_changed_model(fresh_cache, change):
    x = torch.randn(3, 8)
    cuvil.compile(Block(), (x,))
    model, options = change()
    changed = cuvil.compile(model, (x,), **options)
    assert changed.report.program_cache == ""
    torch.testing.assert_close(changed(x), eager(model, x))
    assert len(entries(fresh_cache)) == 2


def test_a_damaged_entry_is_a_miss_and_is_written_again(fresh_cache):
    x = torch.randn(3, 8)
    cuvil.compile(Block(), (x,))
    (entry,) = entries(fresh_cache)
    data = bytearray(entry.read_bytes())
    data[-1] ^= 1
    entry.write_bytes(bytes(data))
    with pytest.warns(RuntimeWarning, match="programs cache entry .* is damaged"):
        compiled = cuvil.compile(Block(), (x,))
    assert compiled.report.program_cache == ""
    torch.testing.assert_close(compiled(x), eager(Block(), x))
    assert cuvil.compile(Block(), (x,)).report.program_cache.startswith("hit")


def test_weights_are_bound_to_the_model_not_stored(fresh_cache):
    x = torch.randn(3, 8)
    cuvil.compile(Block(), (x,))
    (entry,) = entries(fresh_cache)
    header, _ = tensor_entry.unpack(f"cuvil-program {programs.FORMAT}", entry.read_bytes(),
                                    "np")
    kinds = {b[0] for b in header["consts"]}
    assert "path" in kinds  # the biases at least: the model's own memory


class Sorting(nn.Module):
    """Two ops without a kernel, run through torch: `sort`, and `arange` from a symbolic
    start (the stored call holds it as dim text)."""

    def forward(self, x):
        return sorting(x)


def sorting(x):
    n = x.shape[0]
    return torch.sort(x, dim=1).values + torch.arange(n, 2 * n, dtype=x.dtype)[:, None]


def test_ops_run_through_torch_are_stored_and_computed_at_every_batch(fresh_cache):
    x = torch.randn(3, 8)
    first = cuvil.compile(Sorting(), (x,))
    ops = {f.op for f in first.report.fallbacks}
    assert ops == {"torch_op aten.sort.default", "torch_op aten.arange.start"}, ops
    again = cuvil.compile(Sorting(), (x,))
    assert again.report.program_cache.startswith("hit") and len(entries(fresh_cache)) == 1
    assert [f.op for f in again.report.fallbacks] == [f.op for f in first.report.fallbacks]
    for batch in (3, 1, 6):
        x = torch.randn(batch, 8)
        torch.testing.assert_close(again(x), sorting(x))


def test_the_call_spec_is_the_same_after_the_entry():
    from cuvil.cache.programs import _spec_json, _spec_of

    compiled = cuvil.compile(Sorting(), (torch.randn(3, 8),), cache=False)
    spec = dataclasses.replace(compiled._spec, ranges=(("batch", 3, None),))
    assert _spec_of(json.loads(json.dumps(_spec_json(spec)))) == spec
    assert None not in spec.torch_calls and len(spec.torch_calls) == 2
    assert "%dim:batch" in {a for c in spec.torch_calls for a in c.call.args}


Pair = collections.namedtuple("Pair", "out total")


class Named(nn.Module):
    """Returns its own container: the program's results rebuild it from the graph."""

    def forward(self, x):
        return Pair(torch.relu(x), x.sum(1))


def test_what_the_entry_cannot_hold_is_not_stored(fresh_cache):
    x = torch.randn(3, 8)
    compiled = cuvil.compile(Named(), (x,))
    assert compiled._spec.own_containers
    cuvil.compile(Named(), (x,))
    assert entries(fresh_cache) == []
    got = compiled(x)
    assert isinstance(got, Pair)
    torch.testing.assert_close(got.total, x.sum(1))


WARM = textwrap.dedent("""
    import json, sys, time, torch
    sys.path.insert(0, {tests!r})
    import cuvil
    from cache.test_program_cache import {model}, eager
    model, x = {model}(), torch.randn(5, 8)
    compiled = cuvil.compile(model, (x,))
    out = compiled(x)
    seen = {{"hit": compiled.report.program_cache, "sympy": "sympy" in sys.modules,
            "egglog": "egglog" in sys.modules, "ast": "cuvil.dsl.ast" in sys.modules}}
    torch.testing.assert_close(out, eager(model, x))  # that imports sympy
    print(json.dumps(seen))
""")


@pytest.mark.parametrize("model", ["Block", "Sorting"])
def test_a_warm_compile_in_a_new_process_never_imports_the_ir(tmp_path, model):
    """Nor the rules' AST: the key hashes their text; nor for ops run through torch. And
    once Numba's compiled code is evicted, the entry is a miss: compiled the slow way, and
    correct (this process could not show it: it holds the kernels in memory)."""
    script = tmp_path / "warm.py"
    script.write_text(WARM.format(tests=os.path.dirname(os.path.dirname(__file__)),
                                  model=model))
    env = {**os.environ, "CUVIL_CACHE_DIR": str(tmp_path / "cache")}

    def run():  # WARM checks the results against eager
        out = subprocess.run([sys.executable, str(script)], env=env, check=True,
                             capture_output=True, text=True)
        return json.loads(out.stdout.splitlines()[-1])

    runs = [run(), run()]
    assert runs[0]["hit"] == "" and runs[0]["sympy"]
    assert runs[1]["hit"].startswith("hit")
    assert not runs[1]["sympy"] and not runs[1]["egglog"] and not runs[1]["ast"], runs
    if model == "Block":  # Sorting's one kernel is a shared driver, compiled once for all
        shutil.rmtree(tmp_path / "cache" / "kernels" / "__pycache__")  # generated kernels'
        assert run()["hit"] == ""
