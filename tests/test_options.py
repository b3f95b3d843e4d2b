"""`CompileOptions`: the sole device a graph is placed on, the default fallback policy that
follows from the targets, and the targets kept when a device is absent."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from cuvil.errors import CuvilError
from cuvil.ir import devices
from cuvil.options import CompileOptions

DEVICE = next(d for d in sorted(devices.known_devices()) if not devices.on_host(d))
HOST = devices.device_target()[devices.HOST]


def test_one_device_target_off_the_host_is_the_sole_device():
    assert CompileOptions.of(target=DEVICE).sole_device == DEVICE
    assert CompileOptions.of(target=[DEVICE, HOST]).sole_device is None
    assert CompileOptions.of(target=HOST).sole_device is None


def test_the_default_fallback_policy_follows_the_targets():
    assert CompileOptions.of(target=DEVICE).fallback_policy == "error"
    assert CompileOptions.of(target=[DEVICE, HOST]).fallback_policy == "cpu"
    assert CompileOptions.of(target=HOST).fallback_policy == "cpu"
    assert CompileOptions.of(target=DEVICE, fallback_policy="cpu").fallback_policy == "cpu"


@pytest.fixture
def absent_device(monkeypatch):
    """The device's `require` hook raising, as it does where the device is not there."""
    def missing():
        raise CuvilError(f"no {DEVICE} here")

    monkeypatch.setitem(devices._DEVICES, DEVICE,
                        dataclasses.replace(devices.device(DEVICE), require=missing))


def test_an_absent_device_is_dropped_with_one_warning(absent_device):
    with pytest.warns(UserWarning, match=f"compiling for {HOST} alone: target '{DEVICE}': "
                                         f"no {DEVICE} here") as caught:
        options = CompileOptions.of(target=[DEVICE, HOST]).on_present_devices()
    assert len(caught) == 1 and options.targets == (HOST,) and options.host_only


def test_an_absent_sole_device_is_a_one_line_error(absent_device):
    with pytest.raises(CuvilError, match=f"^target '{DEVICE}': no {DEVICE} here$"):
        CompileOptions.of(target=DEVICE).on_present_devices()


def test_present_devices_keep_every_target():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        options = CompileOptions.of(target=HOST).on_present_devices()
    assert options.targets == (HOST,)
