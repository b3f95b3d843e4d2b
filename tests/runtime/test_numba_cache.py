"""Numba's cache for Cuvil's own drivers lives in the Cuvil cache directory (an installed
package may be read-only); other functions keep Numba's own locations. A driver's
dispatcher is made on its first use, and compiles one overload for every constant its
callers pass."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from numba import njit as plain_njit

from cuvil.paths import cache_dir
from cuvil.runtime import numba_cache
from cuvil.runtime.module_cache import import_file
from cuvil.targets.cpu.kernels import blas, gemv


def test_driver_caches_are_under_the_cache_directory(tmp_path):
    """In a fresh process: a dispatcher takes the cache directory of its first use (in this
    one, a test before may have used a driver under a cache directory of its own)."""
    code = ("import json\nfrom cuvil.targets.cpu.kernels import blas, conv, vmath\n"
            "print(json.dumps([f._cache._cache_path for f in "
            "(blas.gemm, conv.im2col_nhwc, vmath.vmax)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "CUVIL_CACHE_DIR": str(tmp_path)}, check=True)
    paths = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(paths) == 3 and all(p.startswith(str(tmp_path / "numba")) for p in paths)


def test_a_driver_call_writes_its_cache_there():
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    b = np.ones((4, 5))
    c = np.zeros((3, 5))
    blas.gemm(a, b, c, 1)
    np.testing.assert_allclose(c, a @ b)
    assert list((cache_dir() / "numba").rglob("blas.gemm-*.nbi"))


def test_functions_outside_the_package_are_left_to_numba(tmp_path):
    @plain_njit(cache=True)
    def twice(x):
        return 2 * x

    assert twice(3) == 6
    assert not twice._cache._cache_path.startswith(str(cache_dir()))


def test_a_cache_directory_is_checked_once_and_again_once_it_is_gone(tmp_path, monkeypatch):
    made = []
    real = numba_cache.tempfile.TemporaryFile
    monkeypatch.setattr(numba_cache.tempfile, "TemporaryFile",
                        lambda **kw: made.append(kw["dir"]) or real(**kw))
    path = tmp_path / "drivers"
    for _ in range(3):
        numba_cache._writable(str(path))
    assert path.is_dir() and made == [str(path)]
    path.rmdir()  # e.g. `cuvil cache clear` while the process runs
    numba_cache._writable(str(path))
    assert path.is_dir() and made == [str(path)] * 2


DRIVERS_IN_A_FRESH_PROCESS = """
import json, pkgutil, importlib
import numba, numpy as np
import cuvil.targets.cpu.kernels as kernels
from cuvil.runtime.numba_cache import Driver
from cuvil.targets.cpu.kernels import conv_post, gemv

modules = [importlib.import_module(f"cuvil.targets.cpu.kernels.{m.name}")
           for m in pkgutil.iter_modules(kernels.__path__)]
drivers = {id(d): d for m in modules for d in vars(m).values() if isinstance(d, Driver)}
made_at_import = sum(d._made is not None for d in drivers.values())

@numba.njit
def kernel(a, wt, c):  # a generated kernel calling a driver: Numba types the global
    gemv.gemv_block(a, wt, c, 0, c.shape[1])

@numba.njit
def halves(a, wt, c):  # constants and variables alike: the overload above serves both
    n = c.shape[1] // 2
    gemv.gemv_block(a, wt, c, n, c.shape[1])
    gemv.gemv_block(a, wt, c, 0, 3)

a, wt = np.random.rand(3, 7), np.random.rand(5, 7)
c = np.zeros((3, 5))
kernel(a, wt, c)
d = np.zeros((3, 5))
halves(a, wt, d)
print(json.dumps({"overloads": len(gemv.gemv_block.overloads),
                  "halves_error": float(np.abs(d - a @ wt.T).max()),
                  "drivers": len(drivers), "made_at_import": made_at_import,
                  "error": float(np.abs(c - a @ wt.T).max()),
                  "gemv_made": gemv.gemv_block._made is not None,
                  "dispatcher": type(gemv.gemv_block.dispatcher).__name__,
                  "unused_made": conv_post.conv2d_nchw_direct_post._made is not None}))
"""


def test_drivers_are_made_when_first_used_and_numba_types_them():
    out = subprocess.run([sys.executable, "-c", DRIVERS_IN_A_FRESH_PROCESS], check=True,
                         capture_output=True, text=True, timeout=600)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["drivers"] > 100 and got["made_at_import"] == 0
    assert got["error"] < 1e-12 and got["gemv_made"] and got["dispatcher"] == "DriverDispatcher"
    assert got["overloads"] == 1 and got["halves_error"] < 1e-12
    assert not got["unused_made"]


def test_a_driver_is_called_and_read_as_its_function():
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    wt = np.ones((4, 3))
    c = np.zeros((2, 4))
    gemv.gemv_block(a, wt, c, 0, 4)  # a call from Python
    np.testing.assert_allclose(c, a @ wt.T)
    assert gemv.gemv_block.__name__ == "gemv_block" and gemv.gemv_block.__doc__ == \
        gemv.gemv_block.py_func.__doc__
    assert gemv.gemv_block.signatures  # the dispatcher's attributes


def test_a_driver_pickles_by_name_and_a_half_built_one_has_no_dispatcher():
    assert pickle.loads(pickle.dumps(gemv.gemv_block)) is gemv.gemv_block
    half = numba_cache.Driver.__new__(numba_cache.Driver)  # as unpickling by state would
    with pytest.raises(AttributeError, match="dispatcher"):  # not a RecursionError
        half.signatures  # noqa: B018 (an attribute read is the test)


def test_a_kernel_module_names_the_dispatcher_itself(tmp_path):
    path = tmp_path / "cuvil_0123456789abcdef0123.py"
    path.write_text("from cuvil.targets.cpu.kernels.gemv import gemv_block\nkernel = gemv_block\n")
    module = import_file(path)
    assert module.kernel is gemv.gemv_block.dispatcher
    assert module.gemv_block is gemv.gemv_block  # the driver itself, elsewhere
