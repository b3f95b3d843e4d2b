"""The CUDA lowering tests run under Numba's CUDA simulator (no GPU needed): it must be on
before `numba.cuda` is first imported, so it is switched on here, at collection. With
`CUVIL_CUDA_DEVICE=1` they run on the real GPU instead (`test_cuda_on_device.py` does that
in a subprocess where one is present)."""

from __future__ import annotations

import os
import sys

import pytest

ON_DEVICE = os.environ.get("CUVIL_CUDA_DEVICE") == "1"
if not ON_DEVICE:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    from numba.core import config

    config.ENABLE_CUDASIM = 1
SIMULATED = ("numba.cuda" not in sys.modules
             or "simulator" in sys.modules["numba.cuda"].jit.__module__)


def pytest_collection_modifyitems(items):
    if SIMULATED or ON_DEVICE:
        return
    skip = pytest.mark.skip(reason="numba.cuda was imported before the simulator was on")
    for item in items:
        if "tests/targets/cuda" in str(item.fspath) and "gpu" not in item.keywords:
            item.add_marker(skip)
