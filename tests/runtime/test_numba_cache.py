"""Numba's cache for Cuvil's own drivers lives in the Cuvil cache directory (an installed
package may be read-only); other functions keep Numba's own locations."""

from __future__ import annotations

import numpy as np
from numba import njit as plain_njit

from cuvil.paths import cache_dir
from cuvil.runtime import blas, conv, numba_cache, vmath


def test_driver_caches_are_under_the_cache_directory():
    root = cache_dir() / "numba"
    for fn in (blas.gemm, conv.im2col_nhwc, vmath.vmax):
        assert fn._cache._cache_path.startswith(str(root))


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
