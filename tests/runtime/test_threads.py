"""Thread policy: a deliberate threading layer, thread counts from `threads=` or torch."""

from __future__ import annotations

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
