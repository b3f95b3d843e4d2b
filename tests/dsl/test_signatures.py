"""`cuvil check` reads a snapshot of the op catalog (`cuvil/dsl/signatures.py`): it holds
every op's signature, and checking against it reports exactly what checking against the
live catalog reports, for every golden case."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuvil.dsl import signatures
from cuvil.dsl.diagnostics import Reporter
from cuvil.dsl.parser import parse_module
from cuvil.dsl.sources import read_sources
from cuvil.library.checker import check_modules
from cuvil.ops import registry

CASES = Path(__file__).resolve().parents[1] / "cvr"


@pytest.fixture
def snapshot(tmp_path, monkeypatch):
    """The snapshot a first `cuvil check` writes, read back as a later one reads it."""
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(signatures, "_KEPT", {})
    assert signatures.catalog(fast=True).live  # the catalog is loaded: it is used, and kept
    kept = signatures._read()
    assert kept is not None and not kept.live
    return kept


def test_the_snapshot_holds_every_signature(snapshot):
    assert snapshot.all_ops() == list(registry.all_ops())
    for name in registry.all_ops():
        op, sig = registry.get(name), snapshot.get(name)
        assert (sig.inputs, sig.variadic, sig.out_dtype, sig.kind, sig.min_inputs) == \
            (op.inputs, op.variadic, op.out_dtype, op.kind, op.min_inputs)
        assert [(a.name, a.kind, a.required) for a in sig.attrs] == \
            [(a.name, a.kind, a.required) for a in op.attrs]
        assert [a.default for a in sig.attrs if not a.required] == \
            [a.default for a in op.attrs if not a.required]
    assert snapshot.names == signatures.value_names()


def diagnostics(source, ops) -> tuple[list[str], list]:
    reporter = Reporter()
    modules = [parse_module(text, path)[0] for path, text in read_sources(source, reporter)]
    library = check_modules(modules, reporter, ops)
    return [d.render() for d in reporter.sorted()], library


@pytest.mark.parametrize("case", sorted(p.name for p in (CASES / "fail").iterdir()
                                        if p.suffix == ".cvr" or p.is_dir())
                         + ["../pass", "stock"])
def test_checking_against_the_snapshot_reports_the_same(case, snapshot):
    source = "stock" if case == "stock" else CASES / "fail" / case
    live, live_library = diagnostics(source, signatures.catalog())
    fast, fast_library = diagnostics(source, snapshot)
    assert fast == live
    assert [(r.label, r.lhs, r.rhs, r.guard) for r in fast_library.rules] == \
        [(r.label, r.lhs, r.rhs, r.guard) for r in live_library.rules]
    assert fast_library.ops.keys() == live_library.ops.keys()
