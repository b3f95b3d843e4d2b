"""Cached Numba code loaded without parsing its linking copy until something links it.

Numba caches a compiled function as its object code plus the LLVM bitcode of the same
code, kept so that a later compile can inline it (`serialize_using_object_code`). Loading
the entry parses that bitcode at once, to link and to list the symbols it defines: 20-25
ms for each of Cuvil's drivers, the largest part of loading a cached kernel, and a warm
compile loads one per kernel. Yet a driver called from the graph's `entry` (Python) is
never linked: only a kernel compiled afterwards that calls it would be.

`install(codegen)` makes `codegen` load object-code entries as `LazyLibrary`: the object
code is loaded as Numba loads it; the bitcode is parsed the first time something asks for
the module (to link it, or to inspect it), and only then are its symbols listed. Until
then the library answers for the symbols it is asked for by looking them up in the loaded
object code, which is what Numba's listing is used to guard.
"""

from __future__ import annotations

from llvmlite import binding as ll
from numba.core.codegen import JITCodeLibrary


class LazyLibrary(JITCodeLibrary):
    """A `JITCodeLibrary` loaded from object code, its linking module parsed on demand."""

    _bitcode: bytes | None = None

    @property
    def _shared_module(self):
        mod = self.__dict__.get("_shared")
        if mod is None and self._bitcode is not None:
            mod = self.__dict__["_shared"] = ll.parse_bitcode(self._bitcode)
            self._bitcode = None
            self._codegen._engine._load_defined_symbols(mod)
        return mod

    @_shared_module.setter
    def _shared_module(self, mod) -> None:
        self.__dict__["_shared"] = mod

    def get_pointer_to_function(self, name: str) -> int:
        """The address of `name` in this library's object code (0 if it has none)."""
        self._ensure_finalized()
        if self._bitcode is None:
            return super().get_pointer_to_function(name)
        return self._codegen._engine.get_function_address(name)


def _unserialize(codegen, state):
    name, kind, data = state
    if kind != "object":
        return JITCodeLibrary._unserialize(codegen, state)
    lib = LazyLibrary(codegen, name)
    lib.enable_object_caching()
    lib._set_compiled_object(data[0])
    lib._bitcode = data[1]
    lib._finalize_final_module()
    return lib


def install(codegen) -> None:
    """Load `codegen`'s cached libraries lazily from now on (once per codegen)."""
    if "unserialize_library" not in vars(codegen):
        codegen.unserialize_library = lambda state: _unserialize(codegen, state)
