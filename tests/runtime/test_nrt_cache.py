"""Numba's runtime module (the NRT) is compiled once and then loaded from Cuvil's cache
(`runtime/nrt_cache.py`): each check runs in a fresh process, where Numba starts cold."""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCRIPT = """
import json, sys
import numpy as np
import numba
from numba.core.registry import cpu_target
from numba.core.runtime import nrtdynmod
from cuvil.runtime import nrt_cache

compiled = []
real = nrtdynmod.create_nrt_module
nrtdynmod.create_nrt_module = lambda ctx: compiled.append(1) or real(ctx)
nrt_cache.initialize(cpu_target.target_context)

@numba.njit
def grown(n):  # allocates, counts references and frees: the NRT at work
    a = np.arange(n) * 2.0
    b = a[1:].copy()
    return b.sum() + len(b)

print(json.dumps({"compiled": len(compiled), "value": grown(100)}))
"""


def _run(cache, **settings: str) -> dict:
    env = {**os.environ, "CUVIL_CACHE_DIR": str(cache), **settings}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, check=True,
                         capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _expected() -> float:
    import numpy as np

    b = (np.arange(100) * 2.0)[1:]
    return float(b.sum() + len(b))


def test_the_nrt_is_compiled_once_then_loaded(tmp_path):
    first, second = _run(tmp_path), _run(tmp_path)
    assert first == {"compiled": 1, "value": _expected()}
    assert second == {"compiled": 0, "value": _expected()}  # loaded, and a compile links it
    assert len(list((tmp_path / "numba").glob("nrt-*.bin"))) == 1


def test_a_torn_file_is_compiled_again_and_rewritten(tmp_path):
    _run(tmp_path)
    (path,) = (tmp_path / "numba").glob("nrt-*.bin")
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    assert _run(tmp_path) == {"compiled": 1, "value": _expected()}
    assert path.read_bytes() == whole
    path.write_bytes(whole[:-1] + bytes([whole[-1] ^ 1]))  # one bit of the code flipped
    assert _run(tmp_path)["compiled"] == 1 and path.read_bytes() == whole


def test_code_for_another_cpu_is_kept_apart(tmp_path):
    _run(tmp_path)
    assert _run(tmp_path, NUMBA_CPU_NAME="generic") == {"compiled": 1, "value": _expected()}
    assert len(list((tmp_path / "numba").glob("nrt-*.bin"))) == 2
