"""A cache entry's bytes: a safetensors file whose metadata holds the entry's JSON header
and a content hash, and whose tensors are the constants the entry stores.

    data = pack("cuvil-graph 4", header, {"w": tensor})   # torch tensors or numpy arrays
    header, tensors = unpack("cuvil-graph 4", data)       # torch tensors; "np": arrays

No pickles: an entry from a shared cache is data. safetensors checks its own layout (the
offsets inside the file, each tensor's size against its dtype and shape); the hash
(sha256 of the format, the header's JSON and every tensor's name, dtype, shape and bytes)
covers what it cannot, a changed byte. An entry that fails either is `Corrupt`: a miss
with a warning (`cuvil.disk_store`), never a wrong result.
"""

from __future__ import annotations

import hashlib
import json
import struct
from typing import Any

from cuvil.disk_store import Corrupt

MAX_HEADER = 100 << 20  # safetensors' own limit on its JSON header


def pack(form: str, header: dict[str, Any], tensors: dict[str, Any]) -> bytes:
    """The entry of `header` (JSON data) and `tensors` (all torch, or all numpy)."""
    text = json.dumps(header, sort_keys=True)
    meta = {"format": form, "header": text, "sha256": _hash(form, text, tensors)}
    if tensors and not _is_numpy(next(iter(tensors.values()))):
        from safetensors.torch import save

        return save(_unshared(tensors), meta)
    from safetensors.numpy import save

    return save(tensors, meta)


def _unshared(tensors: dict[str, Any]) -> dict[str, Any]:
    """The tensors contiguous on the CPU, each with memory of its own (safetensors refuses
    two views of one storage)."""
    out, seen = {}, set()
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        storage = t.untyped_storage()
        if storage.data_ptr() in seen or storage.nbytes() != t.nbytes:
            t = t.clone()
        seen.add(t.untyped_storage().data_ptr())
        out[name] = t
    return out


def unpack(form: str, data: bytes, framework: str = "pt") -> tuple[dict[str, Any], dict]:
    """(header, tensors) of the entry `data`; `Corrupt` unless it is whole and of `form`."""
    meta = metadata(data)
    if meta.get("format") != form:
        raise Corrupt(f"not a {form} entry")
    try:
        if framework == "np":
            from safetensors.numpy import load
        else:
            from safetensors.torch import load
        tensors = load(data)
    except Exception as e:  # safetensors' SafetensorError: a layout that does not hold
        raise Corrupt(f"safetensors: {e}") from None
    if meta.get("sha256") != _hash(form, meta["header"], tensors):
        raise Corrupt("content hash")
    return json.loads(meta["header"]), tensors


def metadata(data: bytes) -> dict[str, str]:
    """The safetensors metadata of `data`: its JSON header is 8 bytes (its length) in."""
    try:
        (size,) = struct.unpack("<Q", data[:8])
        if size > MAX_HEADER:
            raise ValueError("header too long")
        meta = json.loads(data[8:8 + size])["__metadata__"]
    except (struct.error, ValueError, KeyError, TypeError) as e:
        raise Corrupt(f"not a safetensors file ({type(e).__name__})") from None
    if not isinstance(meta, dict) or not {"format", "header", "sha256"} <= meta.keys():
        raise Corrupt("not a cuvil entry")
    return meta


def _hash(form: str, text: str, tensors: dict[str, Any]) -> str:
    h = hashlib.sha256(f"{form}\0{text}".encode())
    for name in sorted(tensors):
        t = tensors[name]
        h.update(f"\0{name}\0{t.dtype}\0{list(t.shape)}\0".encode())
        h.update(_bytes(t))
    return h.hexdigest()


def _bytes(t: Any) -> memoryview:
    if _is_numpy(t):
        import numpy as np

        return memoryview(np.ascontiguousarray(t).reshape(-1).view(np.uint8))
    import torch

    flat = t.detach().cpu().contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy())


def _is_numpy(t: Any) -> bool:
    return type(t).__module__ == "numpy"
