"""Processes sharing one Numba cache directory: two that save overloads of one driver at
once both keep theirs, each loadable as itself; a cached caller whose driver no longer
defines the symbol it calls is compiled again rather than loaded."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

DRIVER = """
from cuvil.runtime.numba_cache import njit

@njit(link=False{options})
def scaled_sum(w, x):
    s = 0.0
    for i in range(x.shape[0]):
        s += w * x[i]
    return s
"""

CALLER = """
from cuvil.runtime.numba_cache import njit
from keyed_driver import scaled_sum

@njit
def twice(x):
    return scaled_sum(2.0, x)
"""

# Each saving process waits, once its index is read and before it writes it back, until
# the other process is saving too and has read the index as well (or 3 s): Numba's
# unlocked update of the index then loses one process's entry and gives both data files
# one name, whichever process writes last.
SAVE_AT_ONCE = """
import json, sys, time
from pathlib import Path
import numpy as np
import numba.core.caching as caching
import keyed_driver as m

me, meet = sys.argv[1], Path(sys.argv[2])

def others(stage):
    return [p for p in meet.glob(stage + "-*") if p.name != stage + "-" + me]

def wait_for(stage, seconds):
    end = time.time() + seconds
    while not others(stage) and time.time() < end:
        time.sleep(0.01)

save_overload, save_index, waited = caching.Cache.save_overload, \\
    caching.IndexDataCacheFile._save_index, []

def saving(self, sig, data):
    (meet / ("saving-" + me)).touch()
    return save_overload(self, sig, data)

def indexing(self, overloads):
    if not waited:
        waited.append(True)
        (meet / ("indexing-" + me)).touch()
        wait_for("saving", 120)
        wait_for("indexing", 3)
    return save_index(self, overloads)

caching.Cache.save_overload, caching.IndexDataCacheFile._save_index = saving, indexing
x = np.arange(1, 40).astype(me)
print(json.dumps({"value": float(m.scaled_sum(0.5, x))}))
"""

LOAD = """
import json, sys
import numpy as np
import {module} as m
fn = getattr(m, sys.argv[1])
args = (0.5,) if sys.argv[1] == "scaled_sum" else ()
values = [float(fn(*args, np.arange(1, 40).astype(t))) for t in sys.argv[2:]]
dispatchers = {{m.scaled_sum.dispatcher, fn.dispatcher}}
print(json.dumps({{"values": values,
                   "compiled": sum(sum(d.stats.cache_misses.values()) for d in dispatchers)}}))
"""


def _json(out: subprocess.CompletedProcess) -> dict:
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _run(folder, script: str, *args: str) -> dict:
    return _json(subprocess.run([sys.executable, "-c", script, *args], cwd=folder,
                                capture_output=True, text=True, timeout=300))


def test_two_processes_saving_overloads_at_once_keep_both(tmp_path):
    (tmp_path / "keyed_driver.py").write_text(DRIVER.format(options=""))
    meet = tmp_path / "meet"
    meet.mkdir()
    dtypes = ("float64", "float32")
    procs = [subprocess.Popen([sys.executable, "-c", SAVE_AT_ONCE, t, str(meet)],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for t in dtypes]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        _json(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    assert {p.name for p in meet.iterdir()} == {f"{s}-{t}" for s in ("saving", "indexing")
                                                for t in dtypes}
    loaded = _run(tmp_path, LOAD.format(module="keyed_driver"), "scaled_sum", *dtypes)
    expected = 0.5 * np.arange(1, 40).sum()
    assert loaded["values"] == [expected, expected]
    assert loaded["compiled"] == 0  # both overloads loaded, each as itself


def test_a_cached_caller_whose_driver_symbol_changed_is_compiled_again(tmp_path):
    (tmp_path / "keyed_driver.py").write_text(DRIVER.format(options=""))
    (tmp_path / "keyed_caller.py").write_text(CALLER)
    load = LOAD.format(module="keyed_caller")
    expected = 2.0 * np.arange(1, 40).sum()
    first = _run(tmp_path, load, "twice", "float64")
    assert first == {"values": [expected], "compiled": 2}
    assert _run(tmp_path, load, "twice", "float64") == {"values": [expected], "compiled": 0}
    # the driver's flags are part of its symbol; the caller's own file is unchanged, so
    # Numba's cache still offers the caller's entry, which names the former symbol
    (tmp_path / "keyed_driver.py").write_text(DRIVER.format(options=", fastmath=True"))
    again = _run(tmp_path, load, "twice", "float64")
    assert again == {"values": [expected], "compiled": 2}
