"""`njit` for Cuvil's own compiled drivers (`blas`, `conv`, `vmath`, `int8`), cached on
disk under the Cuvil cache directory (`<cache>/numba/<runtime hash>/`), never next to the
installed package.

Numba's `cache=True` writes to a `__pycache__` beside the source file; an installed package
may be read-only, and a shared one would mix users' entries. A locator placed first in
Numba's list sends files from this package to the cache directory and leaves every other
function (generated kernel modules already live in `<cache>/kernels/`) as Numba has it.

Numba checks only a cached function's own file, but drivers inline code of other runtime
files (`conv` calls `blas`, `int8` the IR tile of `int8_tile`). So the directory is named
by `runtime_hash()`, the hash of every source file of the runtime and of the target
folders' `kernels/` (where the drivers live): any change there recompiles every driver,
once.
Generated modules quote the same hash in their import lines.

A driver is compiled once per argument types with every constant argument taken as its
plain type (`DriverDispatcher`): Numba would otherwise compile a callee again for each
constant a caller passes (`rows_epilogue(..., 0, rows)` and `(..., r0, r1)` were two
compiles of it, and the tile's `block_at` three), each linked into its caller.

`@njit(link=False)` declares a heavy driver that callers call through its symbol rather
than linking a copy of it (`apart_calls`).
"""

from __future__ import annotations

import os
import tempfile
import threading
from functools import cache, update_wrapper
from pathlib import Path

from numba.core import types
from numba.core.caching import CacheImpl, UserProvidedCacheLocator
from numba.core.registry import CPUDispatcher

from cuvil.ir.devices import HOST, device
from cuvil.paths import cache_dir, drivers_hash
from cuvil.runtime.apart_calls import FixedSymbolCompiler, call_apart
from cuvil.runtime.keyed_cache import use_keyed_file

PACKAGE = Path(__file__).resolve().parents[1]


@cache
def runtime_hash() -> str:
    """A hash of the runtime's and the targets' kernels' Python source (the drivers and
    what they inline), with what the host's code depends on beyond it (`Device.code_key`:
    the BLAS its products call)."""
    extra = device(HOST).code_key()
    return f"{drivers_hash()}-{extra}" if extra else drivers_hash()


class PackageLocator(UserProvidedCacheLocator):
    """Cache files of functions defined in the cuvil package go to `<cache>/numba/`."""

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = str(cache_dir() / "numba" / runtime_hash() /
                               self.get_suitable_cache_subpath(py_file))

    def ensure_cache_path(self) -> None:
        _writable(self._cache_path)

    @classmethod
    def from_function(cls, py_func, py_file):
        if not _in_package(py_file):
            return None
        return super(UserProvidedCacheLocator, cls).from_function(py_func, py_file)


@cache
def _in_package(py_file: str) -> bool:
    return Path(py_file).resolve().is_relative_to(PACKAGE)


_WRITABLE: set[str] = set()


def _writable(path: str) -> None:
    """Numba's check that a cache directory exists and takes files, once per directory
    and process (while it exists) rather than once per function: the runtime defines
    ~110, which cost 50 ms of a warm compile. A failure raises OSError as in Numba."""
    if path in _WRITABLE and os.path.isdir(path):
        return
    os.makedirs(path, exist_ok=True)
    tempfile.TemporaryFile(dir=path).close()
    _WRITABLE.add(path)


def njit(fn=None, **options):
    """`numba.njit(..., cache=True)` with the cache under the Cuvil cache directory, the
    dispatcher made when first used (`Driver`), one overload per plain argument types
    (`DriverDispatcher`). `link=False`: compiled callers call the driver's own code
    (`ApartDispatcher`) instead of linking and inlining a copy of it."""
    if fn is None:
        return lambda f: Driver(f, options)
    return Driver(fn, options)


class Driver:
    """A runtime function's Numba dispatcher, made on its first use.

    The runtime defines ~160 drivers; making their dispatchers (with their on-disk caches)
    cost ~25 ms of every warm compile, which uses a handful. Numba types a global through
    its `_numba_type_`, and inlines or calls it through its attributes, all delegated to
    `dispatcher`, made then; a generated kernel module's `kernel` is the dispatcher
    itself (`module_cache.import_file`), so calls from the entry pay nothing more."""

    def __init__(self, fn, options: dict):
        update_wrapper(self, fn)
        self._link = options.pop("link", True)
        self._fn, self._options, self._made = fn, options, None

    @property
    def dispatcher(self):
        if self._made is None:
            with _MAKING:
                if self._made is None:
                    if PackageLocator not in CacheImpl._locator_classes:
                        CacheImpl._locator_classes.insert(0, PackageLocator)
                    self._made = self._make()
        return self._made

    def _make(self):
        options = {**self._options, "nopython": True, "boundscheck": None}
        made = DriverDispatcher(py_func=self._fn, locals={}, targetoptions=options) \
            if self._link else ApartDispatcher(self, options)
        made.enable_caching()
        return made

    def __getattr__(self, name: str):
        if name.startswith("__") or name in _OWN:  # probed by copy, pickle and inspect, or
            raise AttributeError(name)  # not set yet (a half-built driver): not a dispatcher's
        return getattr(self.dispatcher, name)

    def __call__(self, *args):
        return self.dispatcher(*args)

    def __repr__(self) -> str:
        return f"<cuvil driver {self.__module__}.{self.__qualname__}>"

    def __reduce__(self) -> str:  # by name, as a function is pickled
        return self.__qualname__


class DriverDispatcher(CPUDispatcher):
    """`numba.njit`'s dispatcher, typing each call from compiled code with its arguments'
    plain types: a literal constant (`Literal[int](0)`) is its `int64`, so one compiled
    overload serves every caller, whatever constants they pass."""

    def get_call_template(self, args, kws):
        return super().get_call_template(tuple(types.unliteral(a) for a in args),
                                         {k: types.unliteral(v) for k, v in kws.items()})

    def enable_caching(self):
        super().enable_caching()
        use_keyed_file(self)


class ApartDispatcher(DriverDispatcher):
    """A `DriverDispatcher` whose overloads compiled callers call through their symbol,
    the same in every process, loading them first when loaded from the cache
    (`apart_calls`)."""

    def __init__(self, driver: Driver, targetoptions: dict):
        self.driver = driver
        super().__init__(py_func=driver._fn, locals={}, targetoptions=targetoptions,
                         pipeline_class=FixedSymbolCompiler)

    def add_overload(self, cres):
        super().add_overload(cres)
        if not cres.objectmode:
            call_apart(self.targetctx, cres, self.driver)

    def __reduce__(self):  # as its driver, made again by it where unpickled
        return _dispatcher_of_driver, (self.driver,)


def _dispatcher_of_driver(driver: Driver):
    return driver.dispatcher


def dispatcher_of(fn):
    """`fn`'s Numba dispatcher if it is a `Driver`, else `fn`."""
    return fn.dispatcher if isinstance(fn, Driver) else fn


_MAKING = threading.RLock()
_OWN = frozenset({"_fn", "_options", "_made", "_link", "dispatcher"})
