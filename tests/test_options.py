"""`CompileOptions`: the checks of a call's keyword arguments, and the caches' keys, which
change with every option that changes what the optimizer or the lowering makes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cuvil.errors import CuvilError
from cuvil.options import CompileOptions, Limits

PARAMS = {"cpu": {"gflops": 50.0, "gbps": 10.0, "launch_us": 2.0}}


def test_the_keyword_arguments_are_checked():
    with pytest.raises(CuvilError, match="^at least one target is needed$"):
        CompileOptions.of(target=[])
    with pytest.raises(CuvilError, match=r"^unknown limit\(s\) speed; known: "):
        CompileOptions.of(limits={"speed": 1})
    with pytest.raises(CuvilError, match="^unknown strategy 'fast'; known: latency, "):
        CompileOptions.of(strategy="fast")
    options = CompileOptions.of(target="cpu", limits={"time": 3}, disable=["fusion"])
    assert (options.targets, options.limits, options.disable) == \
        (("cpu",), Limits(time=3), ("fusion",))


@pytest.mark.parametrize("change", [
    {"targets": ("cpu", "cuda")}, {"fallback": False}, {"disable": ("fusion",)},
    {"fuse_elementwise": False}, {"fallback_policy": "error"}, {"strategy": "throughput"},
    {"verify": False}, {"limits": Limits(time=3)},
])
def test_the_program_key_changes_with_each_option_the_program_depends_on(change):
    options = CompileOptions(fallback_policy="cpu")
    assert replace(options, **change).program_key(2) != options.program_key(2)


@pytest.mark.parametrize("change", [
    {"targets": ("cpu", "cuda")}, {"disable": ("fusion",)}, {"strategy": "throughput"},
    {"verify": False}, {"limits": Limits(time=3)}, {"extract": "greedy"},
])
def test_the_optimizer_key_changes_with_each_option_the_optimizer_reads(change):
    options = CompileOptions()
    key = options.optimizer_key({"batch": 2}, PARAMS)
    assert replace(options, **change).optimizer_key({"batch": 2}, PARAMS) != key
    assert options.optimizer_key({"batch": 3}, PARAMS) != key
    assert options.optimizer_key({"batch": 2}, {"cpu": {**PARAMS["cpu"], "gbps": 5.0}}) != key
