"""Fixtures for optimizer tests: the reference `.cvr` example and small hand-built graphs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cuvil.ir import Graph, TensorType

REFERENCE = str(Path(__file__).parents[1] / "cvr" / "pass" / "reference.cvr")


@pytest.fixture(scope="session")
def reference_rules() -> str:
    return REFERENCE


@pytest.fixture(scope="session")
def add_chain():
    return _add_chain


def _add_chain(n: int, shape=(4, 8)) -> Graph:
    """x + c0 + c1 + ... + c(n-1): a chain that associativity rules blow up."""
    g = Graph("chain")
    value = g.input("x", TensorType(shape, "f32"))
    gen = torch.Generator().manual_seed(0)
    for i in range(n):
        value = g.add("add", [value, g.const(torch.randn(*shape, generator=gen), ref=f"c{i}")])
    g.set_outputs(value)
    return g
