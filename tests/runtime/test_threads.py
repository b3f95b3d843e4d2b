"""Thread policy: a deliberate threading layer, thread counts from `threads=` or torch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from cuvil.errors import CuvilError
from cuvil.runtime.threads import active_layer, choose_layer, thread_count


def test_layer_is_omp_or_the_users_choice(monkeypatch):
    layer = choose_layer()
    assert layer in ("omp", "workqueue", "tbb", "default", "safe", "threadsafe", "forksafe")
    assert active_layer() in (layer, "omp", "workqueue", "tbb")


def test_thread_count_follows_torch_unless_given():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert thread_count(None) == 1
        assert thread_count(2) == min(2, __import__("numba").config.NUMBA_NUM_THREADS)
    finally:
        torch.set_num_threads(before)
    with pytest.raises(CuvilError):
        thread_count(0)


LAUNCH = """
import torch
torch.set_num_threads(1)
assert torch.get_num_threads() == 1  # reading it first is what let the launch change it
import cuvil
from cuvil import zoo
model, inputs = zoo.get("mlp", batch=3)
compiled = cuvil.compile(model, inputs, cache=False)  # launches Numba's threading layer
assert (compiled(*inputs) - model(*inputs)).abs().max() < 1e-5
print(torch.get_num_threads(), compiled.threads)
"""


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: every count is 1")
def test_a_compile_leaves_torchs_thread_count_as_the_user_set_it():
    """In a fresh process (the layer launches once): launching Numba's OpenMP layer set
    torch's thread count to every core, and the compiled graph followed it."""
    out = subprocess.run([sys.executable, "-c", LAUNCH], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1", "1"]


PASSIVE = """
import os
import torch
from cuvil.runtime import threads
seen = []
available = threads._available
threads._available = lambda layer: seen.append(os.environ.get("OMP_WAIT_POLICY")) or \\
    available(layer)
threads.choose_layer()
print(seen[0], os.environ.get("OMP_WAIT_POLICY"))
"""


def test_numbas_openmp_runtime_loads_passive_and_the_environment_is_restored():
    """In a fresh process, torch's libgomp loaded first: Numba's own libgomp (loaded when
    the layer is looked for) reads OMP_WAIT_POLICY=PASSIVE, which is gone afterwards."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "NUMBA_THREADING_LAYER")}
    out = subprocess.run([sys.executable, "-c", PASSIVE], capture_output=True, text=True,
                         timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["PASSIVE", "None"]
