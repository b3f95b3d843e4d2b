"""Calls from several threads at once: each zoo model, compiled once, called by 8 threads
100 times each, every thread with inputs of its own at one of two batch sizes, returns to
each thread what torch eager returns for that thread's inputs."""

from __future__ import annotations

import threading

import pytest
import torch
from test_zoo_compiled import SMALL

import cuvil
from cuvil import zoo

THREADS, CALLS = 8, 100


def thread_inputs(name: str, thread: int) -> tuple[torch.Tensor, ...]:
    """The zoo's inputs at batch 1 or 5, made different for each thread (floats shifted,
    token ids rolled, so they stay in the vocabulary)."""
    _, inputs = zoo.get(name, batch=(1, 5)[thread % 2], **SMALL[name])
    return tuple(x + 0.25 * thread if x.is_floating_point() else x.roll(thread)
                 for x in inputs)


def call_from_threads(compiled, work: list[tuple]) -> list[float]:
    """Each thread's largest difference from its eager result over its calls."""
    errors = [float("inf")] * len(work)
    start = threading.Barrier(len(work))

    def run(t: int) -> None:
        inputs, expected = work[t]
        start.wait()
        worst = 0.0
        for _ in range(CALLS):
            worst = max(worst, (compiled(*inputs) - expected).abs().max().item())
        errors[t] = worst

    threads = [threading.Thread(target=run, args=(t,)) for t in range(len(work))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_threads_calling_one_compiled_model_each_get_eagers_result(name, kernel_cache,
                                                                   monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(kernel_cache))
    model, inputs = zoo.get(name, batch=2, **SMALL[name])
    compiled = cuvil.compile(model, inputs)  # as test_zoo_compiled's: the cache serves it
    work = []
    for t in range(THREADS):
        inputs = thread_inputs(name, t)
        with torch.no_grad():
            work.append((inputs, model(*inputs)))
    errors = call_from_threads(compiled, work)
    assert max(errors) <= 1e-4, (name, errors)
