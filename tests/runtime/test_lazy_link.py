"""Cached code loaded without its linking module (`lazy_link`): a warm kernel computes
what it should with its bitcode unparsed, a kernel compiled afterwards that calls it
links it (parsing it then), and a symbol the object code lacks has no address."""

from __future__ import annotations

import json
import subprocess
import sys

from numba.core import types as nbtypes
from runtime_support import KERNEL_SOURCE

from cuvil.runtime.module_cache import import_file

LOAD_THEN_LINK = """
import json
from numba import njit
from numba.core import types
from cuvil.runtime import compile_pool
from cuvil.runtime.lazy_link import LazyLibrary
from cuvil.runtime.module_cache import import_file
kernel = import_file({path!r}).kernel
cold = compile_pool.is_cold(kernel, [(types.int64,)])
lib = kernel.overloads[(types.int64,)].library
lazy = isinstance(lib, LazyLibrary) and lib._bitcode is not None
y, missing = kernel(4), lib.get_pointer_to_function("no_such_symbol")
caller = njit(lambda a: kernel(a) - 2)
print(json.dumps({{"cold": cold, "lazy": lazy, "y": y, "missing": missing,
                   "linked": caller(4), "parsed": lib._bitcode is None}}))
"""


def test_a_warm_kernel_runs_unparsed_and_is_parsed_when_a_new_kernel_links_it(tmp_path):
    path = tmp_path / "cuvil_lazy_link.py"
    path.write_text(KERNEL_SOURCE)
    import_file(path).kernel.compile((nbtypes.int64,))  # into Numba's on-disk cache
    code = LOAD_THEN_LINK.format(path=str(path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "cold": False, "lazy": True, "y": 13, "missing": 0, "linked": 11, "parsed": True}
