"""Calls into a heavy driver's own compiled code, instead of a copy linked into each caller.

Numba links a callee's LLVM module into its caller's (`CPUCodeLibrary.add_linking_library`)
and optimizes and emits the whole again, so at every level of a driver chain all the
callees below are compiled once more: a cold compile spends most of its LLVM time on such
copies. A driver declared `@njit(link=False)` is called through its symbol instead: the
caller's module declares it, and the JIT engine resolves it against the driver's object
code, which Numba loaded into the engine when it compiled (or loaded) the driver to type
the call. Nothing of the driver is inlined: only for drivers whose work dwarfs a call.

Two things make such a call safe across processes and Numba's on-disk cache, where an
unresolved symbol aborts the process:

- The driver's symbol is the same in every process (`FixedSymbolCompiler`): Numba names a
  function with a per-process counter, so a caller cached by one process would name a
  symbol that the driver compiled by another does not define.
- A cached caller loads its drivers before its own code (`DriverLoad`): each call lowered
  records the driver's overload and symbol in the caller's library `_reload_init`, which
  Numba pickles with the caller's cache entry and runs before loading its object code (and
  which a caller's caller inherits when it links the caller). The load checks that the
  overload defines the symbol the caller names; where it does not, the caller's entry is a
  miss and is compiled (`keyed_cache`), never loaded to abort on an unresolved symbol.
"""

from __future__ import annotations

from dataclasses import dataclass

from numba.core import compiler, imputils

FIXED_UID = 0  # in place of Numba's per-process counter, in an apart driver's symbol


class FixedSymbolCompiler(compiler.Compiler):
    """Numba's compiler, naming the function's symbol without a per-process counter: the
    symbol is its module, qualified name, argument types and flags, as in every process."""

    def _compile_bytecode(self):
        self.state.func_id.unique_id = FIXED_UID
        return super()._compile_bytecode()


class UnresolvedDriver(Exception):
    """A driver's overload that a cached caller calls is not defined at the symbol the
    caller names."""


@dataclass(frozen=True)
class DriverLoad:
    """Loads from the cache (or compiles) one overload of a driver and checks that it
    defines `symbol`, the name its callers call it by: run before a cached caller's
    code is loaded. A cached overload loads as a kernel does (`compile_pool.is_cold`),
    without the refresh of Numba's typing and lowering registries that only compiling
    needs. The driver is pickled by reference (module and qualified name)."""

    driver: object  # a `numba_cache.Driver`
    argtypes: tuple
    symbol: str

    def __call__(self) -> None:
        dispatcher = self.driver.dispatcher
        if self.argtypes not in dispatcher.overloads:
            from cuvil.runtime.compile_pool import is_cold

            is_cold(dispatcher, [self.argtypes])
            dispatcher.compile(self.argtypes)
        cres = dispatcher.overloads.get(self.argtypes)  # its library defines its symbol
        if cres is None or cres.fndesc.mangled_name != self.symbol:
            raise UnresolvedDriver(f"{self.driver!r}{self.argtypes} is not {self.symbol}")


def call_apart(targetctx, cres, driver) -> None:
    """Lower calls to `cres`'s function as calls to its symbol, linking nothing, each
    recording its `DriverLoad` in the calling library (replaces Numba's `user_function`
    for it)."""
    load = DriverLoad(driver, tuple(cres.signature.args), cres.fndesc.mangled_name)
    call = imputils.user_function(cres.fndesc, ())

    def lower_call(context, builder, sig, args):
        context.active_code_library._reload_init.add(load)
        return call(context, builder, sig, args)

    lower_call.signature = cres.fndesc.argtypes
    lower_call.libs = ()
    selector = targetctx._defns[cres.entry_point]
    selector.versions = [(lower_call.signature, lower_call)]
    selector._cache.clear()


def drivers_loaded_by(dispatcher) -> list:
    """The dispatchers of the apart drivers that `dispatcher`'s overloads call (and load
    first), and those that theirs call, each once."""
    found: dict = {}
    todo = [dispatcher]
    while todo:
        for cres in list(todo.pop().overloads.values()):
            for load in cres.reload_init or ():
                if isinstance(load, DriverLoad) and load.driver.dispatcher not in found:
                    found[load.driver.dispatcher] = None
                    todo.append(load.driver.dispatcher)
    return list(found)
