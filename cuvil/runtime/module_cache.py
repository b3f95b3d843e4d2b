"""Generated modules as files under the cuvil cache directory, imported like any module.

Numba's `cache=True` cannot cache functions compiled from `exec`'d source, so each
generated module is written to `<cache>/kernels/cuvil_<hash>.py` (named by a hash of its
text, written atomically, never rewritten) and imported from there. Numba then keeps the
compiled kernels in `<cache>/kernels/__pycache__`, and a second process that generates the
same text loads them instead of compiling. Every kernel is a module of its own (its text
holds nothing of the graph, so identical kernels of any graphs share it), and each graph
has an entry module that imports them (`cuvil.runtime.build`).

The cache directory is `cuvil.paths.cache_dir()`: `$CUVIL_CACHE_DIR`, else
`$XDG_CACHE_HOME/cuvil`, else `~/.cache/cuvil`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from cuvil.disk_store import KERNELS
from cuvil.errors import CuvilError


def module_key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def load_module(text: str, directory: str | os.PathLike | None = None) -> tuple[ModuleType, Path]:
    """Import the module with source `text` from the cache (writing it there if new)."""
    key = module_key(text)
    name = f"cuvil_kernels_{key}"
    if name in sys.modules:
        module = sys.modules[name]
        return module, Path(module.__file__)
    path = KERNELS.path(key, directory)
    if KERNELS.load(key, lambda data: data.decode("utf-8") == text, (UnicodeError,),
                    directory) is not True and not KERNELS.put(key, text.encode(), directory):
        raise CuvilError(f"cannot write the kernel cache at {path.parent} (set "
                         "CUVIL_CACHE_DIR to a writable directory)")
    return import_file(path), path


def module_name(path: str | os.PathLike) -> str:
    """The name every process gives the generated module at `path`."""
    return f"cuvil_kernels_{Path(path).stem.removeprefix('cuvil_')}"


def import_file(path: str | os.PathLike) -> ModuleType:
    """Import the generated module at `path` (`<cache>/kernels/cuvil_<hash>.py`) under the
    name every process gives it."""
    name = module_name(path)
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    from numba.core.dispatcher import Dispatcher

    from cuvil.runtime.keyed_cache import use_keyed_file
    from cuvil.runtime.numba_cache import dispatcher_of

    if hasattr(module, "kernel"):  # a runtime driver: the entry calls its dispatcher
        module.kernel = dispatcher_of(module.kernel)
    for value in list(vars(module).values()):  # its functions' on-disk caches
        if isinstance(value, Dispatcher):
            use_keyed_file(value)
    return module
