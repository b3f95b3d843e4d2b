"""The targets a compile is asked for, read against the registry: the sole device a graph
is placed on, the default fallback policy that follows from the targets, the targets kept
when a device is absent, and an unknown target's one-line error."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from cuvil.errors import CuvilError
from cuvil.ir import devices
from cuvil.lower.compile_targets import checked, host_only, present, sole_device
from cuvil.options import CompileOptions

DEVICE = next(d for d in sorted(devices.known_devices()) if not devices.on_host(d))
HOST = devices.device_target()[devices.HOST]


def test_one_device_target_off_the_host_is_the_sole_device():
    assert sole_device((DEVICE,)) == DEVICE
    assert sole_device((DEVICE, HOST)) is None
    assert sole_device((HOST,)) is None


def test_the_default_fallback_policy_follows_the_targets():
    def policy(**options):
        return checked(CompileOptions.of(**options)).fallback_policy

    assert policy(target=DEVICE) == "error"
    assert policy(target=[DEVICE, HOST]) == "cpu"
    assert policy(target=HOST) == "cpu"
    assert policy(target=DEVICE, fallback_policy="cpu") == "cpu"


def test_an_unknown_target_is_a_one_line_error():
    with pytest.raises(CuvilError, match=rf"^no backend for target 'nope'; available targets: "
                                         rf".*\b{HOST}\b"):
        checked(CompileOptions.of(target=[HOST, "nope"]))


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
        options = present(CompileOptions.of(target=[DEVICE, HOST]))
    assert len(caught) == 1 and options.targets == (HOST,) and host_only(options.targets)


def test_an_absent_sole_device_is_a_one_line_error(absent_device):
    with pytest.raises(CuvilError, match=f"^target '{DEVICE}': no {DEVICE} here$"):
        present(CompileOptions.of(target=DEVICE))


def test_present_devices_keep_every_target():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        options = present(CompileOptions.of(target=HOST))
    assert options.targets == (HOST,)
