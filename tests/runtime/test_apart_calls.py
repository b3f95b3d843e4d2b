"""A driver declared `@njit(link=False)` is called by compiled callers through its symbol,
not linked into them; a cached caller loads in a fresh process, even when its driver's
cache entry was written by another process than the caller's."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from cuvil.runtime.apart_calls import drivers_loaded_by

MODULE = """
import numba
import numpy as np

from cuvil.runtime.apart_calls import drivers_loaded_by
from cuvil.runtime.numba_cache import njit

@njit(link=False)
def weighted(w, x):
    s = 0.0
    for i in range(x.shape[0]):
        s += w * np.sin(x[i])
    return s

@numba.njit(cache=True)
def caller(x):
    return weighted(2.0, x) + weighted(0.5, x[1:])

@numba.njit(cache=True)
def outer(x):  # links `caller` (a plain function) and calls `weighted` through it
    return caller(x) * 3.0

@njit
def middle(x):  # a linked driver calling `weighted` apart, as `gemv` calls `gemv_parallel`
    return weighted(2.0, x) + weighted(0.5, x[1:])

@numba.njit(cache=True)
def top(x):  # compiled in a process that loaded `middle` from the cache
    return middle(x) * 3.0
"""

RUN = """
import json, sys
import numba, numpy as np
import {name} as m
if sys.argv[1] == "middle":
    m.middle(np.ones(3))
if sys.argv[1] == "driver":
    for k in range(int(sys.argv[2])):  # other compiles first: Numba's counter moves on
        numba.njit(lambda v: v + k)(1.0)
    m.weighted(1.0, np.ones(3))
x = np.linspace(0.0, 3.0, 50)
fn = getattr(m, sys.argv[1]) if sys.argv[1] != "driver" else m.caller
print(json.dumps({{"value": float(fn(x)), "hits": sum(fn.stats.cache_hits.values()),
                   "driver_compiled": sum(m.weighted.stats.cache_misses.values())}}))
"""


def reference(x: np.ndarray) -> float:
    return float(2.0 * np.sin(x).sum() + 0.5 * np.sin(x[1:]).sum())


def _run(folder, name: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", RUN.format(name=name), *args], cwd=folder,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_caller_declares_the_driver_and_links_no_copy(tmp_path, monkeypatch):
    (tmp_path / "apart_inproc.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import apart_inproc as m

    x = np.linspace(0.0, 3.0, 50)
    np.testing.assert_allclose(m.caller(x), reference(x), rtol=1e-12)
    symbol = next(iter(m.weighted.overloads.values())).fndesc.mangled_name
    caller_lib = next(iter(m.caller.overloads.values())).library
    found = [f for f in caller_lib._final_module.functions if f.name == symbol]
    assert found and all(f.is_declaration for f in found)
    driver_lib = next(iter(m.weighted.overloads.values())).library
    assert not driver_lib._final_module.get_function(symbol).is_declaration
    np.testing.assert_allclose(m.outer(x), 3.0 * reference(x), rtol=1e-12)
    for fn in (m.caller, m.outer):  # what a shared program bundles beside its kernel
        assert drivers_loaded_by(fn) == [m.weighted.dispatcher]


def test_a_cached_caller_loads_after_another_process_compiled_its_driver(tmp_path):
    (tmp_path / "apart_procs.py").write_text(MODULE)
    x = np.linspace(0.0, 3.0, 50)
    first = _run(tmp_path, "apart_procs", "outer")  # compiles driver, caller, outer
    assert first["hits"] == 0 and first["driver_compiled"] == 1
    assert abs(first["value"] - 3.0 * reference(x)) < 1e-9
    driver_files = list((tmp_path / "__pycache__").glob("apart_procs.weighted-*"))
    assert driver_files
    for path in driver_files:  # the driver's entry goes; another process writes it again
        path.unlink()
    again = _run(tmp_path, "apart_procs", "driver", "7")
    assert again["driver_compiled"] == 1 and again["hits"] == 1
    for name, factor in (("caller", 1.0), ("outer", 3.0)):  # loaded, never compiled
        loaded = _run(tmp_path, "apart_procs", name)
        assert loaded["hits"] == 1 and loaded["driver_compiled"] == 0
        assert abs(loaded["value"] - factor * reference(x)) < 1e-9


def test_a_caller_linking_a_cached_driver_loads_its_apart_drivers(tmp_path):
    """A driver loaded from the cache hands its apart drivers' loads on to a caller
    compiled after it, so the caller's own entry loads them in the next process (which
    else aborts on the unresolved symbol)."""
    (tmp_path / "apart_chain.py").write_text(MODULE)
    x = np.linspace(0.0, 3.0, 50)
    _run(tmp_path, "apart_chain", "middle")  # `weighted` and `middle` compiled and stored
    compiled = _run(tmp_path, "apart_chain", "top")  # `middle` loaded, `top` compiled
    assert compiled["hits"] == 0 and compiled["driver_compiled"] == 0
    loaded = _run(tmp_path, "apart_chain", "top")  # `top` loaded: it loads `weighted`
    assert loaded["hits"] == 1 and loaded["driver_compiled"] == 0
    assert abs(loaded["value"] - 3.0 * reference(x)) < 1e-9


RELOAD = """
import importlib, json
import numpy as np
import apart_twice as m
x = np.linspace(0.0, 3.0, 50)
first = m.caller(x)
importlib.reload(m)  # a second driver of the same function: its symbols defined again
print(json.dumps({"values": [float(first), float(m.caller(x))]}))
"""


def test_a_driver_made_again_in_one_process_still_serves_its_callers(tmp_path):
    (tmp_path / "apart_twice.py").write_text(MODULE)
    out = subprocess.run([sys.executable, "-c", RELOAD], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    x = np.linspace(0.0, 3.0, 50)
    values = json.loads(out.stdout.strip().splitlines()[-1])["values"]
    np.testing.assert_allclose(values, [reference(x)] * 2, rtol=1e-12)
