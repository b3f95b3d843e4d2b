"""`cuvil.library.load(source)`: read, parse and check `.cvr` rules into a `RuleLibrary`.

A source is `None` or `"stock"` (the stock library: the top-level `rules/`, shipped inside
the package as `cuvil/stock_rules`), a string containing a newline (`.cvr` text, shown as
`<string>`), any other string or a `Path` (a file, or a directory whose `*.cvr` files load
sorted and recursively; it must exist), or a list/tuple of sources loaded together:
`["stock", "my.cvr"]` is the stock library extended. A rule's name is unique in what loads
together; `override rule NAME` replaces the rule NAME loaded before it (a stock rule).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace

from cuvil.dsl.diagnostics import CvrError, Reporter
from cuvil.dsl.sources import Source, read_sources, stock_rules_dir  # noqa: F401 (tests)
from cuvil.library import stored
from cuvil.library.checked import RuleLibrary
from cuvil.library.checker import check_modules


def load(source: Source = None, tracer=None) -> RuleLibrary:
    """The checked rules of `source`; `CvrError` carrying every diagnostic on any error.
    A `cuvil.trace.Tracer` records the `parse` and `check` stages."""
    reporter = Reporter()
    with _stage(tracer, "parse"):
        texts = _each_file_once(read_sources(source, reporter))
        key = None if reporter.has_errors else stored.key(texts)
        cached = stored.get(key)  # checked when it was kept
        modules = [] if cached is not None else _parse(texts, reporter)
    with _stage(tracer, "check", cached=cached is not None):
        if cached is not None:
            return cached
        library = check_modules(modules, reporter)
    files = [path for path, _ in texts]
    diagnostics = reporter.sorted(files)
    if reporter.has_errors:
        raise CvrError(diagnostics)
    warnings = tuple(d.render() for d in diagnostics if not d.is_error)
    library = replace(library, warnings=warnings)
    stored.put(key, library)
    return library


def check(source: Source) -> RuleLibrary:
    """`load(source)` for `cuvil check`: the same diagnostics, against a snapshot of the op
    catalog when one is kept (`cuvil/ops/signatures.py`: no torch), never cached. Its
    composite ops are signatures: the library is for counting, not for compiling."""
    from cuvil.dsl.signatures import catalog

    reporter = Reporter()
    texts = _each_file_once(read_sources(source, reporter))
    library = check_modules(_parse(texts, reporter), reporter, catalog(fast=True))
    diagnostics = reporter.sorted([path for path, _ in texts])
    if reporter.has_errors:
        raise CvrError(diagnostics)
    return replace(library, warnings=tuple(d.render() for d in diagnostics if not d.is_error))


def _parse(texts: list[tuple[str, str]], reporter: Reporter) -> list:
    from cuvil.dsl.parser import parse_module  # Lark: only when a library is not cached

    modules = []
    for path, text in texts:
        module, diagnostics = parse_module(text, path)
        reporter.extend(diagnostics)
        modules.append(module)
    return modules


def _stage(tracer, name: str, **args):
    return tracer.stage(name, **args) if tracer is not None else contextlib.nullcontext()


def _each_file_once(texts: list[tuple[str, str]]) -> list[tuple[str, str]]:
    seen: set[str] = set()
    out = []
    for path, text in texts:
        key = path if path.startswith("<") else os.path.realpath(path)
        if key not in seen:
            seen.add(key)
            out.append((path, text))
    return out
