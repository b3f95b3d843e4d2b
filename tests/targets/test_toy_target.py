"""A third target is one folder and one `register_target` call: a toy target written to a
temporary folder, computing its own device `toy` with the CPU target's templates and
kernels, its own cost parameters, a copy kernel for transfers and a placement rule, runs a
model as torch eager does, and the compile says the work was lowered for `toy`."""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest
import torch
from torch import nn

import cuvil
from cuvil.ir import devices
from cuvil.lower import target as lowering

TARGET_INIT = '''
"""A toy target: the CPU's kernels on a device of its own, in host memory."""

from cuvil import aligned
from cuvil.ir.devices import Device
from cuvil.targets import register_target

PARAMS = {"gflops": 1e6, "gbps": 1e6, "launch_us": 0.0, "link_gbps": 1e6}
CALLS = []  # (template, group output) of every group the toy target lowered


def _build():
    from toy_target.target import ToyTarget

    return ToyTarget()


register_target(Device("toy", target="toy", params=PARAMS, allocate=aligned.empty), _build)
'''

TARGET_MODULE = '''
"""`ToyTarget`: the CPU target's generators, counted, plus a copy for transfers."""

from dataclasses import dataclass

from cuvil.lower.spec import KernelSpec
from cuvil.targets.cpu.target import GENERATORS, CpuTarget
from toy_target import CALLS, PARAMS


def counted(template, generate):
    def generate_counted(group, ctx):
        CALLS.append((template, group.output))
        return generate(group, ctx)

    return generate_counted


def transfer(group, ctx):
    node = ctx.graph[group.output]
    CALLS.append(("transfer", group.output))
    return KernelSpec("transfer", ["x0", "out"], [node.inputs[0], node.name],
                      ["np.copyto(out, x0)"], parallel=False, python=True)


@dataclass
class ToyTarget(CpuTarget):
    name: str = "toy"
    device: str = "toy"
    gflops: float = PARAMS["gflops"]
    gbps: float = PARAMS["gbps"]
    launch_us: float = PARAMS["launch_us"]

    def __post_init__(self):
        self.generators = {t: counted(t, g) for t, g in GENERATORS.items()}
        self.generators["transfer"] = transfer
'''

PLACEMENT = (
    "ruleset placement\n\n"
    "# linear(x, w, b) on the toy device is linear(x, w, b)\n"
    'rule linear_on_toy: linear(x, w, b) => to_device(linear(to_device(x, "toy"), '
    'to_device(w, "toy"), to_device(b, "toy")), "cpu")\n'
    '    where has_target("toy") and device(x) == "cpu" and device(w) == "cpu" '
    'and device(b) == "cpu"\n')


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The toy target's folder on `sys.path`, imported (so registered) for this test only;
    its module."""
    devices.load_targets()  # the built-in targets, then registries this test may change
    monkeypatch.setattr(devices, "_DEVICES", dict(devices._DEVICES))
    monkeypatch.setattr(lowering, "_TARGETS", dict(lowering._TARGETS))
    folder = tmp_path / "toy_target"
    folder.mkdir()
    (folder / "__init__.py").write_text(textwrap.dedent(TARGET_INIT))
    (folder / "target.py").write_text(textwrap.dedent(TARGET_MODULE))
    (folder / "placement.cvr").write_text(PLACEMENT)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("toy_target")
    yield module
    for name in [n for n in sys.modules if n.split(".")[0] == "toy_target"]:
        del sys.modules[name]


def test_a_target_in_its_own_folder_compiles_a_model(toy, tmp_path):
    assert "toy" in devices.known_devices()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    x = torch.randn(4, 16)
    rules = ["stock", str(tmp_path / "toy_target" / "placement.cvr")]
    compiled = cuvil.compile(model, (x,), target="toy", rules=rules)
    with torch.no_grad():
        expected = model(x)
    assert torch.allclose(compiled(x), expected, atol=1e-5, rtol=0)
    lowered = {template for template, _ in toy.CALLS}
    assert "gemm" in lowered and "transfer" in lowered, toy.CALLS
    report = compiled.report
    assert report.target == "toy"
    assert "toy" in set(report.placement.values())


def test_the_toy_target_is_gone_after_its_test():
    assert "toy" not in devices.known_devices()
