"""The collector paused while Cuvil compiles (`cuvil/gc_pause.py`): off inside `paused`,
as the program had it inside `resumed` and after the last pause ends, nested or not."""

from __future__ import annotations

import gc

import pytest

from cuvil import gc_pause


@pytest.fixture(autouse=True)
def program_gc_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_paused_then_restored():
    with gc_pause.paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_nested_pauses_restore_once_the_last_ends():
    with gc_pause.paused():
        with gc_pause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_resumed_inside_a_pause_gives_the_programs_setting():
    with gc_pause.paused():
        with gc_pause.resumed():
            assert gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_resumed_outside_a_pause_changes_nothing():
    with gc_pause.resumed():
        assert gc.isenabled()
    gc.disable()
    with gc_pause.resumed():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_a_program_that_disabled_the_collector_keeps_it_off():
    gc.disable()
    with gc_pause.paused(), gc_pause.resumed():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_an_error_inside_restores_the_collector():
    with pytest.raises(ValueError), gc_pause.paused():
        raise ValueError
    assert gc.isenabled()


@pytest.mark.parametrize("program_enabled", [True, False])
def test_a_compile_leaves_the_collector_as_the_program_had_it(program_enabled):
    import torch

    import cuvil

    if not program_enabled:
        gc.disable()
    model, x = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()), torch.randn(3, 8)
    compiled = cuvil.compile(model, (x,))
    assert gc.isenabled() == program_enabled
    torch.testing.assert_close(compiled(x), model(x))
