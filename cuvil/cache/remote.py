"""The shared tier of the compile cache: a Redis server named by `CUVIL_CACHE_REDIS`.

Entries are the same bytes as local files (`entry.py`: text, JSON and raw tensor bytes,
checksummed; never pickles), under `cuvil:graph:<key digest>`. A server that cannot be
reached gives one warning and the local cache alone for the rest of the process.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

PREFIX = "cuvil:graph:"
TIMEOUT_S = 2.0
_clients: dict[str, Any] = {}
_down: set[str] = set()


def url() -> str | None:
    value = os.environ.get("CUVIL_CACHE_REDIS", "").strip()
    return value or None


def get(key: str) -> bytes | None:
    client = _client()
    if client is None:
        return None
    try:
        return client.get(PREFIX + key)
    except Exception as e:  # redis raises ConnectionError, TimeoutError, ResponseError, ...
        _give_up(e)
        return None


def put(key: str, data: bytes) -> None:
    client = _client()
    if client is None:
        return
    try:
        client.set(PREFIX + key, data)
    except Exception as e:  # as in `get`
        _give_up(e)


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
