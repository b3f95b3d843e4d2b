"""Every test in tests/dynamo starts and ends with Dynamo's caches empty: its compile counts
and recompiles are its own, and no test hits another's recompile limit."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
