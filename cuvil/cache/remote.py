"""The shared tier of the compile cache: a Redis server named by `CUVIL_CACHE_REDIS`.

Optimized graphs are the same bytes as local files (`entry.py`: a safetensors file with
a content hash; never pickles), under `cuvil:graph:<key digest>`; programs with their code
are bundles under `cuvil:program:<key digest>` (`shared_programs.py`), written and
read only with the fleet secret. A server that cannot be reached gives one warning and the
local cache alone for the rest of the process.

With a fleet secret in `CUVIL_CACHE_SECRET`, every entry a process writes ends in an
HMAC-SHA256 of its name and bytes under that secret, and every entry it reads must carry a
valid one: an entry written without the secret, or changed after (a checksum recomputed
does not help), is refused with a warning and the graph is optimized here. Without the
secret, entries are checksummed only, and anyone who can write to the server can change
what a reader compiles.

`CUVIL_CACHE_TTL` (seconds) gives every entry a process writes that lifetime on the
server; without it, entries stay until the server evicts them.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import warnings
from typing import Any

PREFIX = "cuvil:graph:"
SECRET_ENV = "CUVIL_CACHE_SECRET"
TTL_ENV = "CUVIL_CACHE_TTL"
SIGNATURE = b"\nCUVIL-HMAC-SHA256 "  # then the 32-byte tag, at the entry's end
TIMEOUT_S = 2.0
_clients: dict[str, Any] = {}
_down: set[str] = set()


def url() -> str | None:
    value = os.environ.get("CUVIL_CACHE_REDIS", "").strip()
    return value or None


def get(key: str, prefix: str = PREFIX) -> bytes | None:
    """The entry named `prefix + key`, verified; None if absent, refused or unreachable."""
    client = _client()
    if client is None:
        return None
    try:
        data = client.get(prefix + key)
    except Exception as e:  # redis raises ConnectionError, TimeoutError, ResponseError, ...
        _give_up(e)
        return None
    return data if data is None else _verified(prefix + key, data)


def put(key: str, data: bytes, prefix: str = PREFIX) -> None:
    client = _client()
    if client is None:
        return
    secret = _secret()
    if secret is not None:
        data = data + SIGNATURE + _tag(secret, prefix + key, data)
    try:
        client.set(prefix + key, data, ex=_ttl())
    except Exception as e:  # as in `get`
        _give_up(e)


def damaged(kind: str, key: str, error: Exception) -> None:
    """Warn of a shared entry whose bytes are not whole (`disk_store.Corrupt`)."""
    warnings.warn(f"cuvil: the shared {kind} entry {key[:12]} is damaged ({error}); ignored, "
                  "compiling here", RuntimeWarning, stacklevel=3)


def signing() -> bool:
    """Whether this process has the fleet secret: then the shared tier carries code."""
    return _secret() is not None


def _ttl() -> int | None:
    """`CUVIL_CACHE_TTL` in whole seconds; None (and a warning) for no positive number."""
    value = os.environ.get(TTL_ENV, "").strip()
    if not value:
        return None
    try:
        seconds = int(float(value))
    except ValueError:
        seconds = 0
    if seconds <= 0:
        warnings.warn(f"cuvil: {TTL_ENV}={value!r} is not a positive number of seconds; "
                      "shared entries are written without a lifetime", RuntimeWarning,
                      stacklevel=3)
        return None
    return seconds


def _secret() -> bytes | None:
    value = os.environ.get(SECRET_ENV, "")
    return value.encode() if value else None


def _tag(secret: bytes, name: str, data: bytes) -> bytes:
    return hmac.new(secret, name.encode() + b"\0" + data, hashlib.sha256).digest()


def _verified(name: str, data: bytes) -> bytes | None:
    """`data` without its signature, when the fleet secret signed it (or there is no
    secret); None, with a warning, for an entry the secret did not sign."""
    secret = _secret()
    if secret is None:
        return data
    body, mark, tag = data[:-32 - len(SIGNATURE)], data[-32 - len(SIGNATURE):-32], data[-32:]
    if mark == SIGNATURE and hmac.compare_digest(tag, _tag(secret, name, body)):
        return body
    kind, _, key = name.removeprefix("cuvil:").partition(":")
    warnings.warn(f"cuvil: the shared {kind} entry {key[:12]} is not signed with "
                  f"{SECRET_ENV}; refused, compiling here", RuntimeWarning, stacklevel=3)
    return None


def _client():
    address = url()
    if address is None or address in _down:
        return None
    if address not in _clients:
        try:
            import redis

            _clients[address] = redis.Redis.from_url(
                address, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S)
        except Exception as e:  # an unusable URL, or the redis package missing
            _give_up(e)
            return None
    return _clients[address]


def _give_up(error: Exception) -> None:
    address = url()
    _down.add(address)
    _clients.pop(address, None)
    warnings.warn(f"cuvil: the shared compile cache at {address} is unavailable "
                  f"({type(error).__name__}: {error}); using the local cache only",
                  RuntimeWarning, stacklevel=3)
