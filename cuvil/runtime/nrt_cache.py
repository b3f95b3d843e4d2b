"""Numba's runtime (the NRT) loaded from Cuvil's cache instead of compiled in every process.

Before any compiled function runs, Numba builds the NRT's LLVM module (reference counts,
array allocation helpers) and compiles it with LLVM: ~16 ms of every process, the largest
part of Numba's start after its import. The compiled object is the same from process to
process on a machine, so `initialize(context)` keeps it as Numba keeps a cached function:
its object code and the bitcode later compiles link against, under
`<cache>/numba/nrt-<key>.bin`. The key holds what the code depends on: Numba's and
llvmlite's versions, the CPU's name and features (and any Numba's settings name instead),
and Numba's optimisation level. Loading goes through `lazy_link` (object code now,
bitcode when a compile links it). A file that is missing, torn or of another format is
compiled again and rewritten (atomically).
"""

from __future__ import annotations

import hashlib
from contextlib import suppress

MAGIC = b"cuvil-nrt 1\n"


def initialize(context) -> None:
    """`rtsys.initialize(context)`, its NRT library loaded from the cache when there."""
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.runtime import nrtdynmod, rtsys

    with global_compiler_lock:  # as rtsys.initialize: one thread swaps the function
        if rtsys._init:
            return
        compile_nrt = nrtdynmod.compile_nrt_functions
        nrtdynmod.compile_nrt_functions = _load_or_compile
        try:
            rtsys.initialize(context)
        finally:
            nrtdynmod.compile_nrt_functions = compile_nrt


def _load_or_compile(context):
    """Numba's `nrtdynmod.compile_nrt_functions`, by way of the cache."""
    from numba.core.runtime import nrtdynmod

    from cuvil.runtime.lazy_link import install

    codegen = context.codegen()
    install(codegen)
    path = _path()
    state = _read(path)
    if state is not None:
        return codegen.unserialize_library(("nrt", "object", state))
    module, library = nrtdynmod.create_nrt_module(context)
    library.enable_object_caching()  # as Numba's compile_nrt_functions, keeping the object
    library.add_ir_module(module)
    library.finalize()
    _write(path, *library.serialize_using_object_code()[2])
    return library


def _path():
    from cuvil.paths import cache_dir

    return cache_dir() / "numba" / f"nrt-{machine_key()[:16]}.bin"


def machine_key() -> str:
    """A hash of what Numba's object code depends on: Numba's and llvmlite's versions, the
    CPU's name and features (or those Numba's settings name instead) and the optimisation
    level. Code is shared only between processes whose keys agree."""
    import llvmlite
    import numba
    from llvmlite import binding as ll

    config = numba.config  # a CPU named in the environment is the one Numba compiles for
    text = " ".join([numba.__version__, llvmlite.__version__, ll.get_host_cpu_name(),
                     ll.get_host_cpu_features().flatten(), str(config.CPU_NAME),
                     str(config.CPU_FEATURES), str(config.OPT)])
    return hashlib.sha256(text.encode()).hexdigest()


def _read(path) -> tuple[bytes, bytes] | None:
    """(object code, bitcode), or None if the file is missing or not whole."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if not data.startswith(MAGIC):
        return None
    line, _, body = data[len(MAGIC):].partition(b"\n")
    sizes = line.split(b" ")[1:]  # b"sizes <object> <bitcode>"
    if len(sizes) != 2 or not all(n.isdigit() for n in sizes):
        return None
    n_obj, n_bc = int(sizes[0]), int(sizes[1])
    digest, payload = body[:32], body[32:]
    if len(payload) != n_obj + n_bc or hashlib.sha256(payload).digest() != digest:
        return None
    return payload[:n_obj], payload[n_obj:]


def _write(path, object_code: bytes, bitcode: bytes) -> None:
    from cuvil.atomic import write_bytes

    payload = object_code + bitcode
    with suppress(OSError):  # a read-only cache: compiled again next time
        write_bytes(path, MAGIC + f"sizes {len(object_code)} {len(bitcode)}\n".encode()
                    + hashlib.sha256(payload).digest() + payload)
