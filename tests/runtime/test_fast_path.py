"""The bound call of repeated calls (`cuvil.runtime.fast_path`), against what the entry
it calls is given: it takes exactly the inputs of its plan's shapes, dtypes and layout,
and returns MISS for every other input, so that the general path checks them."""

import threading
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from cuvil.runtime.fast_path import MISS, bind, calling

KEY = (((2, 3), np.dtype(np.float32)),)


class Entry:
    """An entry that writes x + c into its output and records its arguments."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)
        *xs, c, out, n = args
        out[...] = sum(xs) + c + n


@pytest.fixture
def threads():
    old = calling.__dict__.get("threads")
    calling.threads = 2
    yield 2
    calling.threads = old


class Plan:
    """A plan's stand-in: one workspace holding the constant c, the entry's last argument
    5, and a count of the workspaces taken and not given back."""

    post = (5,)

    def __init__(self):
        self.work = SimpleNamespace(pre=(np.ones((2, 3), np.float32),),
                                    output_arrays=lambda: [np.empty((2, 3), np.float32)])
        self.held = 0

    def take(self):
        self.held += 1
        return self.work

    def give(self, work):
        assert work is self.work
        self.held -= 1


def bound(entry, key=KEY, bare=True, plan=None):
    results = lambda outs: ("results", torch.from_numpy(outs[0]))  # noqa: E731
    return bind(entry, key, plan or Plan(), results, 2,
                ((2, 3), np.dtype(np.float32)) if bare else None)


@pytest.mark.parametrize("bare", [True, False])
def test_inputs_of_the_plan_are_passed_through_without_a_copy(threads, bare):
    entry, plan = Entry(), Plan()
    call = bound(entry, bare=bare, plan=plan)
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    first = call((x,))
    out = first if bare else first[1]
    torch.testing.assert_close(out, x + 6)
    assert np.shares_memory(entry.calls[0][0], x.numpy())
    second = call((x.numpy(),))
    again = second if bare else second[1]
    torch.testing.assert_close(again, x + 6)
    assert not np.shares_memory(out.numpy(), again.numpy())  # a new output each call
    assert plan.held == 0  # each call gave its workspace back


@pytest.mark.parametrize("bare", [True, False])
@pytest.mark.parametrize("inputs", [
    (torch.zeros(3, 2),), (torch.zeros(2, 3, dtype=torch.float64),),
    (torch.zeros(3, 2).t(),), (torch.zeros(2, 3, requires_grad=True),),
    (torch.zeros(2, 3), torch.zeros(2, 3)), (), ([[0.0] * 3] * 2,),
    (torch.nn.Parameter(torch.zeros(2, 3)),), (np.zeros((3, 2), np.float32).T,)],
    ids=["shape", "dtype", "layout", "grad", "two", "none", "list", "subclass", "view"])
def test_any_other_input_is_a_miss_and_the_entry_is_not_called(threads, bare, inputs):
    entry = Entry()
    assert bound(entry, bare=bare)(inputs) is MISS
    assert entry.calls == []


def test_a_thread_whose_numba_thread_count_is_another_misses(threads):
    entry, seen = Entry(), []
    call = bound(entry)
    worker = threading.Thread(target=lambda: seen.append(call((torch.zeros(2, 3),))))
    worker.start()
    worker.join()
    assert seen == [MISS] and entry.calls == []
    calling.threads = 3
    assert call((torch.zeros(2, 3),)) is MISS


def test_several_inputs_are_each_checked(threads):
    entry = Entry()
    key = KEY + (((2, 3), np.dtype(np.float32)),)
    call = bound(entry, key, bare=False)
    x, y = torch.ones(2, 3), torch.full((2, 3), 2.0)
    torch.testing.assert_close(call((x, y))[1], x + y + 6)
    assert call((x, y.t().contiguous().t())) is MISS
    assert call((x, y[:, :2])) is MISS
    assert len(entry.calls) == 1
