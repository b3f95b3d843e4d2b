"""The caches that wrap passes (`cuvil/passes.py`'s `Cache`): each looks a pass up by what
its input is, and stores the pass's output on a miss.

    Pass("import", import_, ImportCache())                        # the import cache
    Pass("optimize", optimize_pass, OptimizedCache())             # the compile cache
    Pass("program", compile_passes, ProgramCache(compile_passes))  # the program cache

`ImportCache` is the import cache (`cuvil/cache/imports.py`): the imported graph, keyed
on the model's fingerprint; it wraps the import stage (export -> functionalize ->
convert), whose hit skips torch.export. `OptimizedCache` is the compile cache
(`cuvil/cache`): the optimized graph, keyed on the imported graph, the rules and the
optimizer's options. `ProgramCache` is the program cache (`cuvil/cache/programs.py`): the
compiled program, keyed on the model's fingerprint and the compile's options; it wraps
every pass.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from cuvil import cache as compile_cache
from cuvil import gc_pause, library
from cuvil.cache import imports as import_cache
from cuvil.cache import programs
from cuvil.lower import compile_targets
from cuvil.options import CompileOptions
from cuvil.pipeline.values import Compilation, hints_of
from cuvil.runtime.threads import thread_count
from cuvil.trace import Tracer


@dataclass(frozen=True)
class ImportCache:
    """The import stage's cache (`cuvil/cache/imports.py`; stages "import (cached)",
    "import key", "import store"): the imported graph, keyed on the request's fingerprint
    (`values.fingerprinted`), for a torch module with `options.cache`."""

    def lookup(self, c: Compilation) -> tuple[Any, Compilation | None]:
        r = c.request
        if r.import_key is None:
            return None, None
        key, graph = import_cache.lookup(r.import_key, r.model, r.tracer)
        if graph is None:
            return key, None
        return key, replace(c, graph=graph, hints=hints_of(graph, r.example_inputs))

    def store(self, key: Any, c: Compilation, result: Compilation) -> None:
        """Store the graph where export agreed with the fingerprint's trace (a second
        export checks it): while the optimizer's child works, where there is one."""
        r = c.request
        work = functools.partial(import_cache.store, key, result.graph, result.code_path,
                                 r.example_inputs, r.options.dynamic_shapes, r.tracer)
        if c.ahead is not None and key.fp is not None:
            c.ahead.defer(work)
        else:
            work()


@dataclass(frozen=True)
class OptimizedCache:
    """The optimize pass's cache (stages "cache lookup", "cache store"), with
    `options.cache`."""

    def lookup(self, c: Compilation) -> tuple[Any, Compilation | None]:
        options, tracer = c.request.options, c.request.tracer
        if not options.cache:
            return None, None
        with tracer.stage("cache lookup"):
            params = compile_targets.device_costs(options.targets)
            key = compile_cache.key_of(c.graph, options.rules,
                                       options.optimizer_key(c.hints, params))
            hit = compile_cache.load(key, c.graph, functools.partial(_defs, options))
        if hit is None:
            return key, None
        if hit.report is not None:  # the stages that ran: no optimizer stage
            hit.report.timings = dict(tracer.totals)
        if c.ahead is not None:
            c.ahead.cancel()  # an optimizer child started for nothing: end it before lowering
        return key, replace(c, optimized=hit)

    def store(self, key: Any, c: Compilation, result: Compilation) -> None:
        optimized = result.optimized
        if optimized.report is None:
            return
        optimized.report.cache = f"miss: {compile_cache.why_missed(key)}"
        with gc_pause.resumed(), c.request.tracer.stage("cache store"):
            compile_cache.store(key, optimized, c.graph)


def _defs(options: CompileOptions) -> dict[str, Any]:
    """The composite ops of the rules, by name (a cached graph names those it uses)."""
    return dict(library.load(options.rules).ops)


@dataclass(frozen=True)
class ProgramCache:
    """The cache of the whole list of passes (stages "program cache", "program store"), for
    a request with a fingerprint (`values.fingerprinted`). `compile_passes` compiles a hit
    the slow way, for what only that has (`CompiledGraph.graph`, `source`, `profile`)."""

    compile_passes: Callable[[Compilation], Compilation]

    def lookup(self, c: Compilation) -> tuple[Any, Compilation | None]:
        r = c.request
        if r.fp is None or not r.program_cached:
            return None, None
        with r.tracer.stage("program cache"):
            threads = thread_count(r.options.threads)
            parts = programs.key(r.fp, r.options.rules, r.options.program_key(threads))

            def details():
                return self.compile_passes(Compilation(replace(r, tracer=Tracer()))).compiled

            compiled = programs.load(parts, r.fp.tensors, threads, details, r.fp.shapes)
        if compiled is None:
            return parts, None
        compiled.pricing = lambda: compiled.detailed().pricing()
        return parts, replace(c, compiled=compiled)

    def store(self, parts: Any, c: Compilation, result: Compilation) -> None:
        """Store the program where the import cache stored the model's graph: then the key
        says what the program is."""
        if not import_cache.program_storable(result.graph.import_report.cache):
            return
        with c.request.tracer.stage("program store"), gc_pause.resumed():
            programs.store(parts, c.request.fp.tensors, result.compiled)
