"""Programs through the shared tier: a compiled model's program entry with the code it runs
(its generated modules, Numba's object code for each kernel and for the drivers it calls
apart, `apart_calls`, Numba's runtime library), so that a machine of the fleet meeting a
model another machine compiled runs no export, optimizer, lowering or Numba.

    publish(parts, compiled)     # after `programs.store` wrote the local entry
    fetch(parts)                 # on a local miss: the files written here, or None

Code is shared only under the fleet's secret (`CUVIL_CACHE_SECRET`): without it nothing is
published or fetched here and the shared tier carries optimized graphs alone (data). With
it, `remote` signs every bundle written and refuses, with a warning, one it did not sign.
Numba's cache files inside a bundle are pickles that Numba loads; they are trusted exactly
as far as the object code beside them, which is what the signature is for.

A bundle is keyed by the program's key and the machine (`nrt_cache.machine_key`: Numba's
and llvmlite's versions, the CPU's name and features), so a machine never loads code built
for another CPU. Its bytes are an entry of `tensor_entry` (safetensors, content hash):
the header `{"files": [[where, folder, name], ...]}`, and each file's bytes as the tensor
`f<i>` (uint8).

`where` is "cache" (`folder` inside the cache directory) or "package" (`folder` names a
runtime driver's source file, relative to the cuvil package: Numba keeps its code in a
folder named after the file as installed here, `numba_cache.PackageLocator`). `fetch`
writes each file this machine lacks, atomically; a kernel's object code only where its
Numba index is missing, and the index after it, so that no local index points at files it
did not write. The program then loads from the local cache as any other: a kernel Numba
still cannot find sends the compile the slow way.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cuvil.atomic import write_bytes
from cuvil.cache import remote
from cuvil.cache.entry import Damaged
from cuvil.cache.imports import key_digest
from cuvil.cache.key import digest
from cuvil.cache.tensor_entry import pack, unpack
from cuvil.disk_store import Corrupt, after_store
from cuvil.paths import cache_dir

FORMAT = "cuvil-bundle 2"
PREFIX = "cuvil:program:"
MAX_BYTES = 256 << 20  # a larger program (its stored constants) stays on its machine


def enabled() -> bool:
    return remote.url() is not None and remote.signing()


def bundle_key(parts: dict[str, str]) -> str:
    from cuvil.runtime.nrt_cache import machine_key

    return digest(f"{key_digest(parts)} {machine_key()}", 40)


def publish(parts: dict[str, str], entry: Path, compiled) -> None:
    """Put the bundle of `compiled` (its program entry at `entry`) on the shared tier."""
    if not enabled():
        return
    try:
        files = program_files(entry, compiled)
        if sum(path.stat().st_size for _, _, path in files) > MAX_BYTES:
            return
        data = encode([(where, folder, path.name, path.read_bytes())
                       for where, folder, path in files])
    except (OSError, ValueError, Damaged):  # a file evicted meanwhile, a kernel Numba
        return  # did not cache, or one cached outside this cache directory
    remote.put(bundle_key(parts), data, PREFIX)


def fetch(parts: dict[str, str]) -> str | None:
    """Write here the files of the shared bundle for `parts`; what was fetched, in words
    (None without a bundle, or for one that is damaged or could not be written)."""
    if not enabled():
        return None
    data = remote.get(bundle_key(parts), PREFIX)
    if data is None:
        return None
    try:
        files = decode(data)
        written = [len(body) for where, folder, name, body in files
                   if _write(where, folder, name, body)]
    except (Damaged, OSError, ValueError, KeyError, TypeError):
        return None
    after_store(sum(written))
    functions = sum(name.endswith(".nbi") for _, _, name, _ in files)
    return (f"{len(files)} files ({len(written)} new here, {len(data) / 1e6:.1f} MB; Numba's code "
            f"for {functions} functions) from {remote.url()}")


def program_files(entry: Path, compiled) -> list[tuple[str, str, Path]]:
    """(where, folder, path) of every file the program at `entry` needs, each kernel's
    object code before its index."""
    from cuvil.runtime.apart_calls import drivers_loaded_by
    from cuvil.runtime.nrt_cache import _path as nrt_path

    report, root = compiled.report, cache_dir()
    modules = {Path(report.module_path), *(Path(k.module) for k in report.kernels)}
    files = [("cache", "programs", entry)]
    files += [("cache", "kernels", path) for path in sorted(modules)]
    for kernel in report.kernels:
        if kernel.jit:
            fn = compiled._entry.__globals__[kernel.name]
            for dispatcher in (fn, *drivers_loaded_by(fn)):  # the drivers it calls apart
                files += _numba_files(dispatcher, root)
    nrt = nrt_path()  # where this process did not load it from here, the other compiles it
    if nrt.is_file():
        files.append(("cache", nrt.parent.relative_to(root).as_posix(), nrt))
    return list(dict.fromkeys(files))


def _numba_files(dispatcher, root: Path) -> list[tuple[str, str, Path]]:
    from cuvil.runtime.numba_cache import PACKAGE, PackageLocator

    cache = getattr(dispatcher, "_cache", None)
    index = getattr(getattr(cache, "_cache_file", None), "_index_name", None)
    if index is None:
        raise Damaged(f"{dispatcher} keeps no Numba cache")
    folder, locator = Path(cache._cache_path), cache._impl.locator
    if isinstance(locator, PackageLocator):
        where, name = "package", Path(locator._py_file).resolve().relative_to(PACKAGE)
    else:
        where, name = "cache", folder.relative_to(root)
    base = index.removesuffix(".nbi")
    data = sorted(p for p in folder.iterdir() if p.name.startswith(base + ".")
                  and p.name.endswith(".nbc"))
    return [(where, name.as_posix(), path) for path in [*data, folder / index]]


def encode(files: list[tuple[str, str, str, bytes]]) -> bytes:
    """The bundle of (where, folder, name, bytes) files."""
    header = {"files": [[where, folder, name] for where, folder, name, _ in files]}
    return pack(FORMAT, header, {f"f{i}": np.frombuffer(body, np.uint8)
                                 for i, (_, _, _, body) in enumerate(files)})


def decode(data: bytes) -> list[tuple[str, str, str, bytes]]:
    """(where, folder, name, bytes) of each file; `Damaged` if the bundle is not whole."""
    try:
        header, bodies = unpack(FORMAT, data, "np")
    except Corrupt as e:
        raise Damaged(f"a shared program bundle that is damaged ({e})") from None
    if len(bodies) != len(header["files"]):
        raise Damaged("a shared program bundle with files missing")
    return [(where, folder, name, bodies[f"f{i}"].tobytes())
            for i, (where, folder, name) in enumerate(header["files"])]


def _write(where: str, folder: str, name: str, body: bytes) -> bool:
    """Write one file of a bundle where this machine keeps it, unless it has it (or, for
    Numba's object code, has that kernel's index); whether it was written."""
    path = _folder(where, folder) / _plain(name)
    if name.endswith(".nbc"):
        kept = (path.parent / (name.rsplit(".", 2)[0] + ".nbi")).exists()
    else:
        kept = path.exists() and not name.endswith(".cvp")
    if not kept:
        write_bytes(path, body)
    return not kept


def _folder(where: str, folder: str) -> Path:
    """The local folder a bundle's file goes to; `Damaged` for one outside the cache."""
    parts = Path(folder).parts
    if Path(folder).is_absolute() or ".." in parts:
        raise Damaged(f"a shared program bundle names the folder {folder!r}")
    if where == "cache":
        return cache_dir() / folder
    if where == "package":
        from cuvil.runtime.numba_cache import PACKAGE, PackageLocator, runtime_hash

        source = PACKAGE / folder
        if not source.is_file():
            raise Damaged(f"a shared program bundle names the source {folder!r}")
        return (cache_dir() / "numba" / runtime_hash() /
                PackageLocator.get_suitable_cache_subpath(str(source)))
    raise Damaged(f"a shared program bundle names a place {where!r}")


def _plain(name: str) -> str:
    if Path(name).name != name or name in ("", ".", ".."):
        raise Damaged(f"a shared program bundle names the file {name!r}")
    return name
