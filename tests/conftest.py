"""Shared test set-up: hypothesis settings for a noisy 2-core machine, the zoo models
imported once per session (torch.export takes about a second per model), and the `heavy`
marker: such tests are left out of a run that names no `-m` expression (`./dev test`, CI)
and run with `-m heavy`."""

from __future__ import annotations

import os
import tempfile

import pytest
import torch
from hypothesis import settings

import cuvil.ops.registry  # noqa: F401  (installs the op catalog that types the graphs tests build)

# Deterministic examples (CI runs the same cases every time); no deadline on shared CPUs.
settings.register_profile("cuvil", deadline=None, derandomize=True, max_examples=25)
settings.load_profile("cuvil")

torch.set_num_threads(2)

# A fresh cache directory per test session: tests never read or fill the user's cache
# (compiled kernels, optimized graphs, checked rule libraries), and CI starts cold. The
# workers of one `pytest -n` run share theirs, so each driver is compiled once.
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")
os.environ["CUVIL_CACHE_DIR"] = os.path.join(tempfile.gettempdir(), f"cuvil-test-cache-{_RUN}") \
    if _RUN else tempfile.mkdtemp(prefix="cuvil-test-cache-")
# Each worker's kernel compiles share the cores with the other workers (one compile process
# per core per worker would start workers x cores processes on a large machine).
if "PYTEST_XDIST_WORKER_COUNT" in os.environ and "CUVIL_COMPILE_WORKERS" not in os.environ:
    from cuvil.runtime.compile_pool import worker_count  # the cores, without the variable

    os.environ["CUVIL_COMPILE_WORKERS"] = str(
        max(1, worker_count() // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


def pytest_configure(config):
    config.addinivalue_line("markers", "heavy: left out of a run without -m, for time "
                                       "(`./dev test -m heavy` runs them)")


def pytest_collection_modifyitems(config, items):
    """Without an `-m` expression, the heavy tests are deselected."""
    if config.option.markexpr:
        return
    heavy = [item for item in items if item.get_closest_marker("heavy")]
    if heavy:
        config.hook.pytest_deselected(items=heavy)
        items[:] = [item for item in items if not item.get_closest_marker("heavy")]


@pytest.fixture(scope="session")
def zoo_graph():
    """`zoo_graph(name)` -> (model, graph): the zoo model imported with a dynamic batch."""
    import cuvil
    from cuvil import zoo

    cache: dict[str, tuple] = {}

    def get(name: str):
        if name not in cache:
            model, inputs = zoo.get(name, batch=2)
            cache[name] = (model, cuvil.from_torch(model, inputs))
        return cache[name]

    return get


@pytest.fixture(scope="session")
def kernel_cache(tmp_path_factory):
    """One kernel cache directory per test session, so that CI compiles from cold."""
    return tmp_path_factory.mktemp("cuvil-cache")


@pytest.fixture(scope="session")
def lower(kernel_cache):
    """`lower(graph, **options)`: `compile_graph` with the session's cache directory."""
    from cuvil.runtime import compile_graph

    def run(graph, **options):
        options.setdefault("cache_dir", kernel_cache)
        return compile_graph(graph, **options)

    return run
