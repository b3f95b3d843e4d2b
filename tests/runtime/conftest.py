"""Runtime tests share one kernel cache directory per session (so CI compiles from cold)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def kernel_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cuvil-cache")


@pytest.fixture(scope="session")
def lower(kernel_cache):
    """`lower(graph, **options)`: `compile_graph` with the session's cache directory."""
    from cuvil.lower import compile_graph

    def run(graph, **options):
        options.setdefault("cache_dir", kernel_cache)
        return compile_graph(graph, **options)

    return run
