"""The CUDA lowering tests run under Numba's CUDA simulator (no GPU needed): it must be on
before `numba.cuda` is first imported, so it is switched on here, at collection."""

from __future__ import annotations

import os
import sys

import pytest

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
from numba.core import config  # noqa: E402

config.ENABLE_CUDASIM = 1
SIMULATED = ("numba.cuda" not in sys.modules
             or "simulator" in sys.modules["numba.cuda"].jit.__module__)


def pytest_collection_modifyitems(items):
    if SIMULATED:
        return
    skip = pytest.mark.skip(reason="numba.cuda was imported before the simulator was on")
    for item in items:
        if "tests/lower/cuda" in str(item.fspath) and "gpu" not in item.keywords:
            item.add_marker(skip)
