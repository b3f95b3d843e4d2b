"""A fresh cache directory per test, and a real Redis server on loopback for the shared tier
(skipped where `redis-server` is not installed; `.ci/run` installs it)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time

import pytest


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def dead_redis_url():
    """The address of a Redis server that is not there."""
    return f"redis://127.0.0.1:{free_port()}/0"


@contextlib.contextmanager
def redis_server(workdir):
    """A redis-server on loopback (skipped where it is not installed): (its URL, process)."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no", "--dir", str(workdir)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    try:
        yield f"redis://127.0.0.1:{port}/0", server
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory):
    with redis_server(tmp_path_factory.mktemp("redis")) as (url, _):
        yield url


@pytest.fixture
def shared(redis_url, monkeypatch):
    """The shared tier on the session's server, emptied; a client to it."""
    import redis

    from cuvil.cache import remote

    monkeypatch.setenv("CUVIL_CACHE_REDIS", redis_url)
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    remote._down.clear()
    return client


@pytest.fixture
def own_redis(tmp_path):
    """A redis-server of the test's own (one it may stop): (its URL, process)."""
    with redis_server(tmp_path) as started:
        yield started
