"""Programs and their code through the shared tier, on a real Redis server: a second
machine (another process, another cache directory) compiles a model the first compiled
without running Numba, and says where its parts came from; code is shared only under the
fleet secret; a bundle the secret did not sign is refused and compiled here; a server that
goes down mid-compile costs a warning."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from torch import nn

import cuvil
from cuvil.cache import remote, shared_programs

graph_store = importlib.import_module("cuvil.cache.store")  # not the package's `store`


class Net(nn.Module):
    """A GEMM (a runtime driver's kernel, cached in the package's folder) and a row
    reduction (a generated kernel, cached beside its module)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 5)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x))), torch.tanh(x).sum(1)


def example():
    return Net().eval(), torch.randn(2, 16)


MEMBER = textwrap.dedent("""
    import json, sys, torch
    from numba.core import event
    sys.path.insert(0, {tests!r})
    import cuvil
    from cache.test_shared_programs import example

    compiled = []
    class Counting(event.Listener):
        def on_start(self, ev): compiled.append(str(ev.data["dispatcher"]))
        def on_end(self, ev): pass
    event.register("numba:compile", Counting())
    model, x = example()
    fast = cuvil.compile(model, (x,))
    with torch.no_grad():
        error = max((a - b).abs().max().item() for a, b in zip(fast(x), model(x)))
    print(json.dumps({{"program": fast.report.program_cache, "numba": len(compiled),
                      "error": error}}))
""")


def member(tmp_path, name: str, redis_url: str, secret: str) -> dict:
    """A fleet member with cache `name`: what its compile of `Net` reported."""
    script = tmp_path / "member.py"
    script.write_text(MEMBER.format(tests=os.path.dirname(os.path.dirname(__file__))))
    env = {**os.environ, "CUVIL_CACHE_DIR": str(tmp_path / name),
           "CUVIL_CACHE_REDIS": redis_url, "CUVIL_CACHE_SECRET": secret}
    out = subprocess.run([sys.executable, "-W", "always", str(script)], env=env, text=True,
                         capture_output=True, check=True)
    return {**json.loads(out.stdout.splitlines()[-1]), "stderr": out.stderr}


def test_a_second_machine_runs_the_first_ones_code_without_numba(shared, tmp_path):
    """Three members, each with a cache of its own: the first compiles and publishes; the
    second compiles nothing; a third, after the bundle is changed (a checksum recomputed,
    the signature kept), refuses it and compiles here."""
    url = os.environ["CUVIL_CACHE_REDIS"]
    first = member(tmp_path, "a", url, "fleet")
    assert first["program"] == "" and first["numba"] > 0 and first["error"] < 1e-5
    assert len(shared.keys(shared_programs.PREFIX + "*")) == 1
    second = member(tmp_path, "b", url, "fleet")
    assert second["numba"] == 0 and second["error"] < 1e-5, second
    assert second["program"].startswith("hit (shared cache"), second
    assert "the program and its code fetched" in second["program"]
    # 3 kernels and the 8 drivers that the GEMM kernel calls apart (`apart_calls`)
    assert "Numba's code for 11 functions" in second["program"], second["program"]

    name, = shared.keys(shared_programs.PREFIX + "*")
    signed = shared.get(name)
    cut = len(signed) - 32 - len(remote.SIGNATURE)
    files = [(w, f, n, b + b"\nraise SystemExit('tampered')\n" if n.endswith(".py") else b)
             for w, f, n, b in shared_programs.decode(signed[:cut])]
    shared.set(name, shared_programs.encode(files) + signed[cut:])
    third = member(tmp_path, "c", url, "fleet")
    assert third["program"] == "" and third["numba"] > 0 and third["error"] < 1e-5
    assert "is not signed with CUVIL_CACHE_SECRET; refused" in third["stderr"]
    assert not any(b"tampered" in p.read_bytes() for p in (tmp_path / "c").rglob("*.py"))


def test_without_the_secret_no_code_is_shared(shared, fresh_cache, monkeypatch):
    monkeypatch.delenv("CUVIL_CACHE_SECRET", raising=False)
    model, x = example()
    cuvil.compile(model, x)  # a lone tensor is the one example input
    assert shared.keys(shared_programs.PREFIX + "*") == []
    assert shared.keys(remote.PREFIX + "*")  # optimized graphs (data) are shared


def test_a_server_that_goes_down_mid_compile_costs_a_warning(own_redis, monkeypatch,
                                                             fresh_cache):
    """The server answers the compile's lookups, then is gone before its stores."""
    url, server = own_redis
    monkeypatch.setenv("CUVIL_CACHE_REDIS", url)
    monkeypatch.setenv("CUVIL_CACHE_SECRET", "fleet")
    remote._down.clear()
    encode = graph_store.encode  # the optimized graph's entry, written before the program's

    def server_gone(*args):
        server.terminate()
        server.wait(timeout=10)
        return encode(*args)

    monkeypatch.setattr(graph_store, "encode", server_gone)
    model, x = example()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fast = cuvil.compile(model, (x,))
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x))
    down = [w for w in caught if "unavailable" in str(w.message)]
    assert len(down) == 1, [str(w.message) for w in caught]
    assert url in str(down[0].message)


@pytest.mark.parametrize("folder", ["../outside", "/etc"])
def test_a_bundle_cannot_write_outside_the_cache(fresh_cache, folder):
    bundle = shared_programs.encode([("cache", folder, "x.py", b"pass\n")])
    with pytest.raises(shared_programs.Damaged, match="names the folder"):
        for where, f, name, body in shared_programs.decode(bundle):
            shared_programs._write(where, f, name, body)
