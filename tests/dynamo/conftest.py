"""Every test in tests/dynamo starts and ends with Dynamo's caches empty: its compile counts
and recompiles are its own, and no test hits another's recompile limit. `programs` lists the
backend's compiled graphs a test builds (`program_support.compiled`: the model one calls)."""

from __future__ import annotations

import pytest
import torch

from cuvil.dynamo import compiler


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def programs(monkeypatch) -> list:
    """The `compiler.Program`s built while the test runs (one per compiled graph)."""
    built = []
    init = compiler.Program.__init__

    def record(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self)
    monkeypatch.setattr(compiler.Program, "__init__", record)
    return built
