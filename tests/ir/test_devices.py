"""The device registry: the target folders under `cuvil/targets/` register their devices on
the first lookup, each device answers what the layers below the targets ask of it, and the
cost parameters it registers are its lowering target's own."""

from __future__ import annotations

import pytest

from cuvil.errors import CuvilError
from cuvil.ir import devices
from cuvil.lower.target import get_target


def test_the_target_folders_register_their_devices():
    folders = sorted(p.name for p in devices.TARGETS_FOLDER.iterdir()
                     if (p / "__init__.py").exists())
    assert set(devices.device_target().values()) >= set(folders)
    assert devices.HOST in devices.known_devices()


def test_only_the_host_device_is_host_memory_among_the_built_in_ones():
    on_host = {name: devices.on_host(name) for name in devices.known_devices()}
    assert on_host[devices.HOST]
    assert not all(on_host.values())  # the GPU's arrays are device arrays


def test_an_unknown_device_is_a_one_line_error():
    with pytest.raises(CuvilError, match="unknown device 'nowhere'"):
        devices.device("nowhere")


def test_registered_cost_parameters_are_the_lowering_targets_own():
    for device, target in devices.device_target().items():
        lowering = get_target(target)
        assert lowering.device == device
        assert devices.device_params()[target] == lowering.cost_params


def test_the_host_allocates_aligned_arrays():
    array = devices.device(devices.HOST).allocate(10, "float32")
    assert array.shape == (10,) and array.dtype.name == "float32"
    assert array.ctypes.data % 64 == 0
