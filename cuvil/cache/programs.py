"""The program cache: a compiled model's lowered program, stored under what the model is
and what the compile was asked for, so that a warm `cuvil.compile` rebuilds the callable
from it: no torch.export, no optimizer, no lowering, and no IR (importing sympy alone is
0.4 s of a warm compile here).

    key = programs.key(fp, rules, options)            # the import cache's key, and more
    compiled = programs.load(key, fp.tensors, threads, details)    # or None
    programs.store(key, fp.tensors, compiled)         # after a compile the slow way

The key is the import cache's (`imports.py`: the model's fingerprint, Cuvil's source,
torch's and Python's versions) with the rules' text, the compile's options (target,
limits, disabled rules, strategy, fallbacks, elementwise fusion, the thread count) and the
optimizer's library versions. A compile stores its program only where the import cache
stored the model's graph, or would have but for a fake trace's key (export agreed with the
trace, so the key says what the program is; `imports.program_storable`), for the CPU target
alone, without quantization, and with no fallback but aten ops run through torch on the
CPU (`runtime.calling.TorchFallback`: plain data, made without the graph).

The entry (`programs/<key>.cvp`, `cuvil.disk_store`) is data, no pickles: a safetensors
file (`tensor_entry`) whose header is

    {"parts": ..., "entry": file, "kernels": [[name, file, signatures], ...],
     "spec": {...}, "consts": [binding, ...], "report": {...}}

and whose tensors are the constants stored. `spec` is the `runtime.calling.CallSpec`. The
entry and kernel modules are the module cache's files, named relative to the cache
directory (so a directory moved elsewhere still serves); their Numba code is loaded from
Numba's cache, and a kernel that cache no longer holds makes a miss. A constant is bound
to the live model's tensor when the array the kernels read is that tensor's memory
(`["path", "fc.bias"]`), else stored (`["bytes", name]`: a transposed or pre-packed
weight, the entry's tensor `name`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cuvil import aligned
from cuvil.cache.entry import Damaged, report_json
from cuvil.cache.imports import key_digest, key_parts
from cuvil.cache.key import digest, rules_hash, versions
from cuvil.cache.tensor_entry import pack, unpack
from cuvil.disk_store import PROGRAMS
from cuvil.ir.devices import on_host
from cuvil.ir.torch_template import TorchCall
from cuvil.lower.report import CompileReport, FallbackReport, KernelReport, StepReport
from cuvil.paths import cache_dir
from cuvil.runtime.calling import Array, CallSpec, Param, TorchFallback

FORMAT = "3"


def key(fp, rules: Any, options: dict[str, Any]) -> dict[str, str]:
    """The entry's key parts: the import key of fingerprint `fp`, then the rest."""
    return {**key_parts(fp), "program format": FORMAT, "rules": rules_hash(rules),
            "options": digest(repr(sorted(options.items()))), "libraries": versions()}


def load(parts: dict[str, str], tensors: dict[str, torch.Tensor], threads: int, details,
         shapes=None):
    """The compiled graph stored under `parts` here or, with the fleet secret, on the shared
    tier (`shared_programs`); None on a miss. Its constants are bound to
    `tensors` (the model's, by path); `details()` compiles it the slow way, for what only
    that has (`CompiledGraph.graph`, `source`, `profile`), and for inputs other than
    `shapes` where the key vouches for those alone (a fake trace's)."""
    from cuvil.cache import shared_programs

    def decoded(where: str):
        return lambda data: decode(data, parts, tensors, threads, details, shapes, where)

    # any failure to rebuild it: the slow way, stored
    compiled = PROGRAMS.load(key_digest(parts), decoded("program cache"), Exception)
    if compiled is None and (fetched := shared_programs.fetch(parts)) is not None:
        compiled = PROGRAMS.load(key_digest(parts), decoded("shared cache"), Exception)
        if compiled is not None:
            compiled.report.program_cache += f"; the program and its code fetched: {fetched}"
    return compiled


def store(parts: dict[str, str], tensors: dict[str, torch.Tensor], compiled) -> bool:
    """Store `compiled` under `parts` if the entry can hold it; whether it was stored."""
    try:
        data = encode(parts, compiled, tensors)
    except (Damaged, TypeError, ValueError, AttributeError):
        return False
    from cuvil.cache import shared_programs

    if not PROGRAMS.put(key_digest(parts), data):  # a read-only cache: the slow way again
        return False
    shared_programs.publish(parts, entry_path(parts), compiled)
    return True


def encode(parts: dict[str, str], compiled, tensors: dict[str, torch.Tensor]) -> bytes:
    """The entry's bytes: its header and the stored constants."""
    spec, report = compiled._spec, compiled.report
    if None in spec.torch_calls or (spec.own_containers and spec.output_tree is None) or \
            not all(on_host(d) for _, d in spec.slots):
        raise Damaged("a fallback that needs the graph, output containers torch cannot "
                      "write, or a device")
    consts, stored = _bindings(compiled._consts, tensors)
    kernels = [[k.name, Path(k.module).name, [list(map(list, s)) for s in
                                             _signatures(compiled, k)]]
               for k in report.kernels]
    header = {"parts": parts, "entry": Path(report.module_path).name, "kernels": kernels,
              "spec": _spec_json(spec), "consts": consts, "report": _report_json(report)}
    return pack(f"cuvil-program {FORMAT}", header, stored)


def decode(data: bytes, parts: dict[str, str], tensors: dict[str, torch.Tensor],
           threads: int, details, shapes=None, where: str = "program cache"):
    from cuvil.runtime.compiled import CompiledGraph
    from cuvil.runtime.threads import choose_layer

    start = time.perf_counter()
    header, stored = unpack(f"cuvil-program {FORMAT}", data, "np")
    if header["parts"] != parts:
        raise Damaged("another key")
    consts = [_const(b, tensors, stored) for b in header["consts"]]
    spec = _spec_of(header["spec"])
    choose_layer()
    entry = _load_kernels(header["entry"], header["kernels"])
    report = _report_of(header["report"], key_digest(parts), where)
    if shapes is not None:
        report.program_cache += "; the example inputs' shapes alone (another compiles first)"
    report.compile_s = time.perf_counter() - start
    compiled = CompiledGraph(spec, entry, consts, report, threads, details=details,
                             shapes=shapes)
    report.detailed = compiled.detailed
    return compiled


def _load_kernels(entry_name: str, kernels: list) -> Any:
    """The entry function, its kernels' modules imported and their code loaded from Numba's
    cache (`Damaged` if Numba would have to compile one: the slow way does that)."""
    from cuvil.ir.devices import HOST, device
    from cuvil.runtime import compile_pool
    from cuvil.runtime.module_cache import import_file

    device(HOST).prepare()
    where = cache_dir() / "kernels"
    for _, name, _ in kernels:
        import_file(where / name)
    module = import_file(where / entry_name)
    for name, _, sigs in kernels:
        fn = getattr(module, name)
        sigs = [compile_pool.decode(s) for s in sigs]
        if sigs and compile_pool.is_cold(fn, sigs):
            raise Damaged(f"kernel {name} is not in Numba's cache")
        for sig in sigs:
            fn.compile(sig)
    return module.entry


def _signatures(compiled, kernel: KernelReport) -> list[tuple]:
    """The argument types `kernel` was compiled for, as `compile_pool.encode` writes them."""
    from cuvil.runtime import compile_pool

    if not kernel.jit:
        return []
    fn = compiled._entry.__globals__[kernel.name]
    encoded = [compile_pool.encode(sig) for sig in fn.signatures]
    if [compile_pool.decode(e) for e in encoded] != list(fn.signatures):
        raise Damaged(f"kernel {kernel.name} takes arguments the entry cannot name")
    return encoded


def _bindings(arrays: list[np.ndarray], tensors: dict[str, torch.Tensor]):
    """How each constant array is found again, and the arrays stored, by name."""
    at = {}
    for path, t in tensors.items():
        if t.is_cpu and t.untyped_storage().nbytes():
            at.setdefault((t.data_ptr(), tuple(t.shape), str(t.dtype)), path)
    bindings, stored = [], {}
    for a in arrays:
        if not isinstance(a, np.ndarray):
            raise Damaged("a constant on a device")
        found = at.get((a.ctypes.data, a.shape, f"torch.{a.dtype}")) \
            if a.flags.c_contiguous else None
        if found is not None and tensors[found].is_contiguous():
            bindings.append(["path", found])
            continue
        name = f"c{len(stored)}"
        bindings.append(["bytes", name])
        stored[name] = a if a.flags.c_contiguous else a.copy(order="C")  # 0-d stays 0-d
    return bindings, stored


def _const(binding: list, tensors: dict[str, torch.Tensor], stored: dict) -> np.ndarray:
    if binding[0] == "path":
        return tensors[binding[1]].detach().numpy()
    found = stored[binding[1]]
    out = aligned.empty(found.shape, found.dtype)  # aligned and writable, as the kernels were
    out[...] = found
    return out


def _spec_json(spec: CallSpec) -> dict:
    data = asdict(spec)
    data["structure"] = _tagged(spec.structure)
    return data


def _spec_of(data: dict) -> CallSpec:
    params = tuple(Param(p["name"], tuple(p["shape"]), p["dtype"], _perm(p["perm"]))
                   for p in data["params"])
    buffers, outputs = ([Array(a["value"], tuple(a["shape"]), a["dtype"], a["slot"],
                               _perm(a["perm"])) for a in data[k]]
                        for k in ("buffers", "outputs"))
    return CallSpec(data["name"], params, tuple(buffers), tuple(outputs),
                    tuple(tuple(s) for s in data["slots"]), tuple(data["symbols"]),
                    dict(data["results"]), _untagged(data["structure"]),
                    tuple(data["fallbacks"]), data["own_containers"], data["output_tree"],
                    tuple(_torch_fallback_of(c) for c in data["torch_calls"]),
                    tuple(tuple(r) for r in data["ranges"]),
                    tuple((int(i), v) for i, v in data.get("writes", ())))


def _torch_fallback_of(data: dict) -> TorchFallback:
    return TorchFallback(TorchCall.from_json(data["call"]),
                         tuple(tuple(p) for p in data["in_perms"]), tuple(data["out_perm"]),
                         tuple(data.get("group", ())))


def _perm(p: list | None) -> tuple[int, ...] | None:
    return None if p is None else tuple(p)


def _tagged(structure: Any) -> Any:
    """An output structure as JSON that keeps tuples, lists and dicts apart."""
    if isinstance(structure, str):
        return structure
    if isinstance(structure, dict):
        if not all(isinstance(k, str) for k in structure):
            raise Damaged("an output dict with keys that are not strings")
        return {"dict": {k: _tagged(v) for k, v in structure.items()}}
    kind = "tuple" if type(structure) is tuple else "list" if type(structure) is list else None
    if kind is None:
        raise Damaged(f"an output container {type(structure).__name__}")
    return {kind: [_tagged(v) for v in structure]}


def _untagged(data: Any) -> Any:
    if isinstance(data, str):
        return data
    (kind, value), = data.items()
    if kind == "dict":
        return {k: _untagged(v) for k, v in value.items()}
    items = [_untagged(v) for v in value]
    return tuple(items) if kind == "tuple" else items


def _report_json(report: CompileReport) -> dict:
    data = {f.name: getattr(report, f.name) for f in fields(report)
            if f.name not in ("kernels", "steps", "optimizer", "graph", "fallbacks")}
    return {**data, "kernels": [asdict(k) for k in report.kernels],
            "fallbacks": [asdict(f) for f in report.fallbacks],
            "steps": [asdict(s) for s in report.steps],
            "optimizer": report_json(report.optimizer)}


def _report_of(data: dict, key: str, where: str) -> CompileReport:
    """The stored report, as this load did it: every kernel loaded, nothing lowered;
    `where` the entry came from."""
    kernels = [KernelReport(**{**k, "compile_s": 0.0, "cached": True}) for k in data["kernels"]]
    steps = [StepReport(**{**s, "nodes": tuple(s["nodes"])}) for s in data["steps"]]
    fallbacks = [FallbackReport(**f) for f in data["fallbacks"]]
    hit = f"hit ({where}, key {key[:12]})"
    optimizer = None if data["optimizer"] is None else \
        StoredOptimizeReport(data["optimizer"], f"{hit}: the optimizer did not run")
    report = StoredReport(**{**data, "kernels": kernels, "steps": steps, "lower_s": 0.0,
                             "fallbacks": fallbacks, "optimizer": optimizer})
    report.program_cache = f"{hit}: export, optimizer and lowering skipped"
    return report


class StoredReport(CompileReport):
    """The compile's report as the entry holds it. Its `graph`, the optimized graph, comes
    from `detailed()` (the compiled graph's: the same model compiled the slow way), on
    first use."""

    detailed = None  # set once the compiled graph is made

    @property
    def graph(self):
        if self._graph is None and self.detailed is not None:
            self._graph = self.detailed().report.graph
        return self._graph

    @graph.setter
    def graph(self, value) -> None:
        self._graph = value


class StoredOptimizeReport:
    """The optimizer's report as the entry holds it, rebuilt on first use (an
    `egraph.report.OptimizeReport`: that imports the IR); its `cache` says this hit."""

    def __init__(self, data: dict, cache: str):
        self._data, self.cache, self._report = data, cache, None

    def _rebuilt(self):
        if self._report is None:
            from cuvil.cache.entry import report_of

            self._report = report_of(self._data)
            self._report.cache = self.cache
            self._report.timings = {}  # no optimizer stage ran
        return self._report

    def __getattr__(self, name: str):
        return getattr(self._rebuilt(), name)

    def __str__(self) -> str:
        return str(self._rebuilt())


def entry_path(parts: dict[str, str]) -> Path:
    return PROGRAMS.path(key_digest(parts))
