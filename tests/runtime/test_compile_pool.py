"""Cold kernels compiled side by side in worker processes (`compile_pool`): the kernels
the workers compile are reported as compiled (not cached) and compute what they should;
a worker that fails costs nothing but time; the shares balance the expected work."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from runtime_support import KERNEL_SOURCE, B, t

import cuvil
from cuvil.errors import CuvilError
from cuvil.ir import Graph
from cuvil.runtime import compile_pool
from cuvil.runtime.compile_pool import Job


def two_kernel_graph(scale: float) -> Graph:
    """A GEMM and a reduction after it: two kernels that no other test generates."""
    torch.manual_seed(0)
    g = Graph("pool")
    x = g.input("x", t(B, 24))
    h = g.add("relu", [g.add("matmul", [x, g.const(torch.randn(24, 40), "w")])])
    g.set_outputs((g.add("mul", [g.add("sum", [h], {"dim": [-1], "keepdim": True}),
                                 g.scalar(scale)]),))
    return g


def test_cold_kernels_compile_in_workers_and_match_the_reference(tmp_path, monkeypatch):
    monkeypatch.setenv("CUVIL_COMPILE_WORKERS", "2")
    monkeypatch.setattr(compile_pool, "cold_drivers", lambda helpers: set())
    started = []
    real = compile_pool.compile_cold

    def counted(jobs, workers=None):
        done = real(jobs)
        started.append((len(jobs), len(done.jobs), done.workers))
        return done

    monkeypatch.setattr(compile_pool, "compile_cold", counted)
    g = two_kernel_graph(1.75)
    compiled = cuvil.runtime.compile_graph(g, cache_dir=tmp_path, threads=1)
    # kernels another test compiled in this process already are not cold
    (cold, done, workers), = started
    assert cold == done >= 2 and workers == 1
    assert sum(not k.cached for k in compiled.report.kernels if k.jit) >= cold
    x = torch.randn(5, 24)
    torch.testing.assert_close(compiled(x), cuvil.run(g, x))
    again = cuvil.runtime.compile_graph(g, cache_dir=tmp_path, threads=1)
    assert len(started) == 1  # nothing cold the second time: no workers
    torch.testing.assert_close(again(x), cuvil.run(g, x))


def test_a_failing_worker_leaves_the_compile_to_this_process(tmp_path, monkeypatch):
    """Two cold kernels over two processes, the worker handed a job it cannot do: its
    kernel is left uncompiled, and compiles here when called."""
    from numba.core import types as nbtypes

    from cuvil.runtime.module_cache import import_file

    real, started = compile_pool._start, []

    def failing(share, shares):
        started.append(share)
        return real([Job("/nonexistent/cuvil_0.py", "kernel", ())], shares)

    monkeypatch.setattr(compile_pool, "_start", failing)
    jobs = []
    for name in ("cuvil_failing_a", "cuvil_failing_b"):
        (tmp_path / f"{name}.py").write_text(KERNEL_SOURCE)
        kernel = import_file(tmp_path / f"{name}.py").kernel
        jobs.append((Job(str(tmp_path / f"{name}.py"), "kernel", ((("int64",),),)), kernel))
    done = compile_pool.compile_cold(jobs, workers=2)
    assert done.workers == 1 and len(started) == 1
    left = [fn for _, fn in jobs if not fn.overloads]
    assert len(left) == 1  # the failed worker's, and nothing of it in Numba's cache:
    assert compile_pool.is_cold(left[0], [(nbtypes.int64,)])
    assert [fn(4) for _, fn in jobs] == [13, 13]


def test_the_workers_stay_warm_between_compiles(tmp_path):
    """Two compiles of cold kernels, one after the other: the second's share goes to the
    same worker process (loky's reusable executor), and every kernel computes what its
    Python function does."""
    from cuvil.runtime.module_cache import import_file

    pids = []
    for n in range(2):
        jobs = []
        for name in (f"cuvil_warm_{n}_a", f"cuvil_warm_{n}_b"):
            (tmp_path / f"{name}.py").write_text(KERNEL_SOURCE)
            kernel = import_file(tmp_path / f"{name}.py").kernel
            jobs.append((Job(str(tmp_path / f"{name}.py"), "kernel", ((("int64",),),)), kernel))
        done = compile_pool.compile_cold(jobs, workers=2)
        assert done.workers == 1 and len(done.pids) == 1
        pids += done.pids
        assert [fn(4) for _, fn in jobs] == [fn.py_func(4) for _, fn in jobs]
    assert pids[0] == pids[1] != os.getpid()


def test_a_stuck_worker_is_stopped_and_the_next_compile_gets_a_fresh_one(tmp_path,
                                                                         monkeypatch):
    from cuvil.runtime.module_cache import import_file

    monkeypatch.setattr(compile_pool, "WORKER_TIMEOUT_S", 2)
    stuck = tmp_path / "cuvil_stuck.py"
    stuck.write_text("import time\ntime.sleep(60)\n" + KERNEL_SOURCE)
    jobs = []
    for name in ("cuvil_stuck_here_a", "cuvil_stuck_here_b"):
        (tmp_path / f"{name}.py").write_text(KERNEL_SOURCE)
        jobs.append((Job(str(tmp_path / f"{name}.py"), "kernel", ((("int64",),),)),
                     import_file(tmp_path / f"{name}.py").kernel))
    monkeypatch.setattr(compile_pool, "_balance", lambda rest, n: [rest[:1], [
        Job(str(stuck), "kernel", ((("int64",),),))]])
    done = compile_pool.compile_cold(jobs, workers=2)
    assert done.workers == 1 and done.pids == ()
    monkeypatch.undo()
    (tmp_path / "after").mkdir()
    test_the_workers_stay_warm_between_compiles(tmp_path / "after")


def test_a_warm_worker_compiles_a_module_of_another_cache_directory_there(tmp_path):
    """A worker that imported `cuvil_<key>.py` from one cache directory, given the same
    file in another, leaves the code in the other's Numba cache."""
    from numba.core import types as nbtypes

    from cuvil.runtime.module_cache import import_file

    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
        jobs = []
        for name in ("cuvil_moved_a", "cuvil_moved_b"):
            path = tmp_path / folder / f"{name}.py"
            path.write_text(KERNEL_SOURCE)
            kernel = import_file(path).kernel if folder == "one" else \
                fresh_kernel(path, f"{folder}_{name}")  # the module name is one's
            jobs.append((Job(str(path), "kernel", ((("int64",),),)), kernel))
        done = compile_pool.compile_cold(jobs, workers=2)
        assert done.workers == 1
        for job, _ in jobs:
            again = fresh_kernel(job.path, f"{folder}_again_{Path(job.path).stem}")
            assert not compile_pool.is_cold(again, [(nbtypes.int64,)])


@pytest.mark.parametrize("value", ["two", "0", "-1"])
def test_a_bad_worker_count_is_a_one_line_error(monkeypatch, value):
    monkeypatch.setenv("CUVIL_COMPILE_WORKERS", value)
    with pytest.raises(CuvilError, match=f"CUVIL_COMPILE_WORKERS .* not '{value}'"):
        compile_pool.worker_count()


def test_one_worker_means_no_processes(monkeypatch):
    monkeypatch.setenv("CUVIL_COMPILE_WORKERS", "1")
    assert compile_pool.worker_count() == 1
    done = compile_pool.compile_cold([(Job("a", "k", ()), None), (Job("b", "k", ()), None)])
    assert done == compile_pool.Done([], 0)


def test_a_driver_never_compiled_is_compiled_here_first_by_one_kernel():
    kernels = "cuvil.targets.cpu.kernels"
    gemm, vexp = ("gemm", f"{kernels}.blas"), ("vexp", f"{kernels}.vmath")
    jobs = [Job("a", "k", (), 1, (gemm,)), Job("b", "k", (), 1, (gemm, vexp)),
            Job("c", "k", (), 1, (gemm,)), Job("d", "k", (), 1, ())]
    first, rest = compile_pool._pioneers(jobs, {"gemm", "vexp"})
    assert [j.path for j in first] == ["a", "b"] and [j.path for j in rest] == ["c", "d"]


def test_shares_balance_the_expected_work():
    jobs = [Job(str(i), "k", (), w) for i, w in enumerate([4, 4, 1, 1, 1, 4, 1])]
    shares = compile_pool._balance(jobs, 2)
    loads = sorted(sum(j.weight for j in s) for s in shares)
    assert loads == [8.0, 8.0] and sorted(j.path for s in shares for j in s) == \
        sorted(j.path for j in jobs)


def test_a_driver_compiled_in_this_process_is_not_cold():
    import numpy as np

    from cuvil.targets.cpu.kernels import conv

    conv.pad_plane(np.ones((2, 3), np.float32), np.empty((4, 5), np.float32), 1, 1)
    assert compile_pool.cold_drivers({"pad_plane": "cuvil.targets.cpu.kernels.conv"}) == set()


def test_a_kernel_without_an_on_disk_cache_is_never_sent_to_a_worker():
    from numba import njit
    from numba.core import types as nbtypes

    uncached = njit(lambda a: a + 1)
    assert not compile_pool.is_cold(uncached, [(nbtypes.int64,)])


def fresh_kernel(path, name: str):
    """`kernel` of the module file `path`, imported anew (a fresh Numba dispatcher)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kernel


def test_a_cached_kernel_is_loaded_once_and_a_cold_one_is_not_compiled(tmp_path):
    from numba.core import types as nbtypes

    path = tmp_path / "cuvil_loaded_once.py"
    path.write_text(KERNEL_SOURCE)
    sig = (nbtypes.int64,)
    cold = fresh_kernel(path, "loaded_once_a")
    assert compile_pool.is_cold(cold, [sig])
    assert not cold.overloads and not cold.stats.cache_misses  # nothing was compiled
    cold.compile(sig)  # now in Numba's on-disk cache
    warm = fresh_kernel(path, "loaded_once_b")
    assert not compile_pool.is_cold(warm, [sig])
    assert sig in warm.overloads and sum(warm.stats.cache_hits.values()) == 1  # loaded...
    warm.compile(sig)
    assert sum(warm.stats.cache_hits.values()) == 1  # ...once: compile finds it loaded
    assert warm(4) == 13


LOAD_IN_A_FRESH_PROCESS = """
import json, sys
from numba.core import types
from cuvil.runtime import compile_pool
from cuvil.runtime.module_cache import import_file
kernel = import_file({path!r}).kernel
cold = compile_pool.is_cold(kernel, [(types.int64,)])
registries = "numba.np.arraymath" in sys.modules
print(json.dumps({{"cold": cold, "registries": registries, "y": kernel(4)}}))
"""


def test_a_cached_kernel_loads_in_a_fresh_process_without_numbas_registries(tmp_path):
    """Loading needs none of the typing and lowering registries a compile installs
    (`compile_pool.load_cached`): the loaded kernel computes what it should."""
    import json
    import subprocess
    import sys

    from numba.core import types as nbtypes

    from cuvil.runtime.module_cache import import_file

    path = tmp_path / "cuvil_loaded_fresh.py"
    path.write_text(KERNEL_SOURCE)
    import_file(path).kernel.compile((nbtypes.int64,))
    code = LOAD_IN_A_FRESH_PROCESS.format(path=str(path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "cold": False, "registries": False, "y": 13}
