"""The op catalog's signatures, readable without the catalog: all that checking `.cvr` needs.

The catalog (`registry.py` and the op modules) imports torch, sympy and numpy, seconds in
a fresh process. Checking rules needs only each op's signature (inputs, attributes with
their kinds and defaults, `variadic`, `out_dtype`) and the dtype, layout and device names.
`catalog(fast=True)` (what `cuvil check` asks for) gives them from a snapshot of the
catalog kept in the cache directory (`rules/signatures-<hash>.json`, the hash of
`cuvil/ops` and `cuvil/ir`'s source; JSON, never unpickled), unless the catalog is loaded
already; the first check after a change of that source loads the catalog and writes the
snapshot. Every other caller gets the live catalog.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import json
import sys
from dataclasses import dataclass
from typing import Any

from cuvil.paths import cache_dir, package_hash

_REQUIRED = object()  # a snapshot attribute's default when it must be given


@dataclass(frozen=True)
class AttrSignature:
    name: str
    kind: str
    default: Any = _REQUIRED

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED


@dataclass(frozen=True)
class Signature:
    """An `OpDef` as the checker reads it: no type inference, no reference, no kernel."""

    name: str
    inputs: tuple[str, ...]
    attrs: tuple[AttrSignature, ...]
    variadic: bool = False
    out_dtype: str | None = None
    kind: str = "misc"
    lowering: str = ""  # the op's kernel family (`OpDef.lowering`)

    @property
    def min_inputs(self) -> int:
        return sum(1 for i in self.inputs if not i.endswith("?"))

    def attr_spec(self, name: str) -> AttrSignature | None:
        return next((a for a in self.attrs if a.name == name), None)


class Catalog:
    """What the checker asks of the op catalog: `live` (the registry itself, composite ops
    become real `OpDef`s) or a snapshot (composite ops become `Signature`s)."""

    def __init__(self, ops: dict[str, Any], names: dict[str, list[str]], live: bool):
        self.ops, self.names, self.live = ops, names, live

    def exists(self, name: str) -> bool:
        return name in self.ops

    def get(self, name: str) -> Any:
        return self.ops.get(name)

    def all_ops(self) -> list[str]:
        return list(self.ops)

    def attr(self, name: str, kind: str) -> Any:
        if not self.live:
            return AttrSignature(name, kind)
        from cuvil.ops.registry import AttrSpec

        return AttrSpec(name, kind)


def catalog(fast: bool = False) -> Catalog:
    """The live catalog; with `fast`, its snapshot while the catalog is not loaded."""
    if fast and "cuvil.ops.registry" not in sys.modules:
        kept = _read()
        if kept is not None:
            return kept
    live = _live()
    if fast:
        _write(live)
    return live


def value_names() -> dict[str, list[str]]:
    """The dtype, layout and device names an attribute of that kind may take: the devices
    are those registered now (`cuvil.ir.devices`), a target registered late included."""
    from cuvil.ir.devices import known_devices

    if "cuvil.ir.types" not in sys.modules and (kept := _read()) is not None:
        names = kept.names
    else:
        names = _live_names()
    return {**names, "device": sorted(known_devices())}


@functools.cache
def _live_names() -> dict[str, list[str]]:
    from cuvil.ir.types import LAYOUTS, DType

    return {"dtype": sorted(d.value for d in DType), "layout": sorted(LAYOUTS)}


class _Live(Catalog):
    """The registry itself, asked at each lookup (ops registered later are seen)."""

    def __init__(self):
        from cuvil.ops import registry

        self.registry = registry
        super().__init__({}, value_names(), live=True)

    def exists(self, name: str) -> bool:
        return self.registry.exists(name)

    def get(self, name: str) -> Any:
        return self.registry.CATALOG.get(name) if self.registry.exists(name) else None

    def all_ops(self) -> list[str]:
        return list(self.registry.all_ops())


def _live() -> Catalog:
    return _Live()


def _file():
    return cache_dir() / "rules" / f"signatures-{package_hash('ops')}-{package_hash('ir')}.json"


_KEPT: dict[str, Catalog] = {}


def _read() -> Catalog | None:
    path = _file()
    if str(path) not in _KEPT:
        try:
            data = json.loads(path.read_text())
            ops = {op["name"]: _signature(op) for op in data["ops"]}
            _KEPT[str(path)] = Catalog(ops, data["names"], live=False)
        except (OSError, ValueError, KeyError, TypeError, SyntaxError):
            return None
    return _KEPT[str(path)]


def _signature(op: dict) -> Signature:
    attrs = tuple(AttrSignature(n, k) if d is None else AttrSignature(n, k, ast.literal_eval(d))
                  for n, k, d in op["attrs"])
    return Signature(op["name"], tuple(op["inputs"]), attrs, op["variadic"], op["out_dtype"],
                     op["kind"], op["lowering"])


def _write(live: Catalog) -> None:
    ops = [{"name": o.name, "inputs": list(o.inputs), "variadic": o.variadic,
            "out_dtype": o.out_dtype, "kind": o.kind, "lowering": o.lowering,
            "attrs": [[a.name, a.kind, None if a.required else repr(a.default)]
                      for a in o.attrs]} for o in map(live.get, live.all_ops())]
    from cuvil.atomic import write_text

    with contextlib.suppress(OSError):  # a read-only cache: the next check loads the catalog
        write_text(_file(), json.dumps({"ops": ops, "names": live.names}))
