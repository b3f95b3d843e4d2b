"""The heap of a training process (`cuvil/dynamo/heap.py`): memory a step frees at the
heap's top is reused by the next step without new page faults once the backend compiled a
backward graph, and the thresholds are left alone where the program set glibc's own."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cuvil.dynamo import heap

# A step's worth of memory: 12 blocks of 8 MiB, each touched, all freed at the end.
STEPS = """
import ctypes, resource, sys
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def step():
    blocks = [libc.malloc(8 << 20) for _ in range(12)]
    for b in blocks:
        ctypes.memset(b, 1, 8 << 20)
    for b in blocks:
        libc.free(b)
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
if sys.argv[1] == "keep":
    from cuvil.dynamo.heap import keep_freed_memory
    assert keep_freed_memory()
step(); step()
before = faults()
step()
print(faults() - before)
"""


def faults_of_a_step(mode: str) -> int:
    """The page faults of the third step of `STEPS`, in a fresh process."""
    done = subprocess.run([sys.executable, "-c", STEPS, mode], capture_output=True,
                          text=True, check=True, env=_plain_env())
    return int(done.stdout.strip().splitlines()[-1])


def _plain_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items()
            if k not in heap._USER_SETTINGS and k != "GLIBC_TUNABLES"}


@pytest.mark.skipif(heap._glibc() is None, reason="glibc's malloc only")
def test_a_step_reuses_the_memory_the_step_before_freed():
    pages = 12 * (8 << 20) // 4096
    assert faults_of_a_step("default") > pages // 2  # glibc trims the top, then faults
    assert faults_of_a_step("keep") < pages // 20


def test_the_programs_own_malloc_settings_are_left_alone(monkeypatch):
    monkeypatch.setattr(heap, "_done", [])
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")
    monkeypatch.setattr(heap, "_glibc", lambda: pytest.fail("mallopt must not be called"))
    assert heap.user_chose()
    assert not heap.keep_freed_memory()
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1")
    assert heap.user_chose()
