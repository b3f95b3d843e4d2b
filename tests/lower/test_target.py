"""The Target interface: targets register generators and cost parameters; a template a
target lacks makes its groups fall back; the CPU target's parameters reach the optimizer."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from lowering_support import B, assert_matches_reference, t, templates

from cuvil.ir import Graph
from cuvil.lower import Target, get_target, register_target


def graph() -> Graph:
    g = Graph("target")
    x = g.input("x", t(B, 8))
    w = g.const(torch.randn(8, 4), "w")
    g.set_outputs(g.add("tanh", [g.add("matmul", [x, w])]))
    return g


def test_cpu_target_parameters():
    cpu = get_target("cpu")
    assert set(cpu.cost_params) == {"gflops", "gbps", "launch_us"}
    assert {"elementwise", "gemm", "rows", "conv", "pool", "attention"} <= set(cpu.generators)


def test_registered_target_without_a_template_falls_back(lower):
    cpu = get_target("cpu")
    gemm_only = Target("gemm_only", gflops=1.0, gbps=1.0, launch_us=1.0,
                       generators={"gemm": cpu.generators["gemm"]})
    register_target(gemm_only)
    g = graph()
    compiled = lower(g, target="gemm_only", fuse_elementwise=False)
    assert templates(compiled) == ["gemm"]
    assert [f.op for f in compiled.report.fallbacks] == ["tanh"]
    assert "no elementwise kernels" in compiled.report.fallbacks[0].reason
    assert_matches_reference(g, compiled, (torch.randn(3, 8),), fallbacks=1)


def test_target_decorators_shape_the_module(lower):
    cpu = get_target("cpu")
    serial = dataclasses.replace(cpu, name="no_cache",
                                 kernel_decorator="@njit(nogil=True, fastmath={fastmath})")
    register_target(serial)
    g = graph()
    compiled = lower(g, target="no_cache")
    assert "@njit(nogil=True, fastmath=FAST)" in compiled.source
    assert_matches_reference(g, compiled, (torch.randn(2, 8),))


def test_a_kernel_numba_rejects_falls_back_or_is_a_clear_error(lower):
    """A generator whose code Numba cannot type: the node runs through torch, and with
    fallback=False the error names the op, never a Numba traceback."""
    from cuvil.errors import CuvilError
    from cuvil.lower.spec import KernelSpec

    def broken(group, ctx):
        return KernelSpec("elementwise", ["x0", "out"], [ctx.graph[group.output].inputs[0],
                                                         group.output],
                          ["out[0] = undefined_helper(x0)"], parallel=False)

    cpu = get_target("cpu")
    register_target(dataclasses.replace(cpu, name="broken",
                                        generators={**cpu.generators, "elementwise": broken}))
    g = graph()
    compiled = lower(g, target="broken", fuse_elementwise=False)
    assert [f.op for f in compiled.report.fallbacks] == ["tanh"]
    assert "Numba rejected" in compiled.report.fallbacks[0].reason
    assert_matches_reference(g, compiled, (torch.randn(2, 8),), fallbacks=1)
    with pytest.raises(CuvilError, match="tanh.*Numba rejected") as e:
        lower(g, target="broken", fuse_elementwise=False, fallback=False)
    assert "Traceback" not in str(e.value) and "\n" not in str(e.value)
