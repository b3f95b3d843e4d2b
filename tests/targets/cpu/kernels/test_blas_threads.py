"""The BLAS thread policy (`blas_threads.single_threaded_blas`): scipy's OpenBLAS, the one
Numba's `np.dot` calls, runs one thread; numpy's and torch's pools are left as they are."""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCRIPT = """
import json, sys
from threadpoolctl import threadpool_info
from cuvil.targets.cpu.kernels.blas_threads import single_threaded_blas

def blas_threads():
    return {i["filepath"]: i["num_threads"] for i in threadpool_info()
            if i["user_api"] == "blas"}

before = blas_threads()
single_threaded_blas()
configured = blas_threads()
imported = "scipy.linalg" in sys.modules
import scipy.linalg.cython_blas  # what Numba's np.dot imports: the same library
print(json.dumps({"before": before, "configured": configured, "imported": imported,
                  "after_import": blas_threads()}))
"""


def test_scipy_blas_is_single_threaded_and_numpys_is_left_alone():
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, timeout=300, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    scipy_libs = [p for p in got["configured"] if f"scipy.libs{os.sep}" in p]
    assert scipy_libs and all(got["configured"][p] == 1 for p in scipy_libs)
    assert got["after_import"] == got["configured"]  # no second OpenBLAS was loaded
    assert not got["imported"]  # the library alone, not the scipy.linalg package
    for path, threads in got["before"].items():
        if path not in scipy_libs:
            assert got["configured"][path] == threads
