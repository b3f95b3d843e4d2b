"""Verification verdicts, kept so that a user rule is verified once per installation.

A rule's key hashes what its verdict depends on: its label (the verifier's random stream is
seeded by it), both sides, the guard and the tolerance (positions and descriptions left
out), the body of every composite op it uses (through other composite ops), the targets
the verifier knows (the devices and those the rules declare) if its guard reads targets,
and the verifier's version: the source of the packages verification reads (`cuvil/library`,
`cuvil/ops`, `cuvil/ir`, `cuvil/dsl`), torch's version, the seed and the number of
instances. A rule set's key hashes its sources' paths
and text, the rules disabled, the stock library's text and the verifier's version: a
record under it lets a warm compile skip loading the rules.

Only sound verdicts are kept (an unsound or unverifiable rule ends the compile; its fix
changes its key). They live in `<cache>/rules/verdicts/`, one small JSON file each,
written atomically, and in the process; `cuvil cache clear --only rules` forgets them.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
from dataclasses import fields, is_dataclass
from typing import Any

from cuvil.atomic import write_text
from cuvil.paths import cache_dir, package_hash

SEED = 0  # the seed `cuvil rules verify` defaults to
INSTANCES = 50  # and its number of instances (`verify.INSTANCES`)
_IN_PROCESS: dict[str, dict] = {}


@functools.cache
def verifier_version() -> str:
    from importlib import metadata

    packages = " ".join(package_hash(p) for p in ("library", "verify", "ops", "ir", "dsl"))
    return f"{packages} torch {metadata.version('torch')} seed {SEED} instances {INSTANCES}"


def rule_key(rule, library) -> str:
    """The key of `rule`'s verdict, as a rule of `library` (a `RuleLibrary`)."""
    h = hashlib.blake2b(digest_size=20)
    h.update(verifier_version().encode())
    h.update(f"\0{rule.label}\0".encode())
    for part in (rule.lhs, rule.rhs, rule.guard, rule.tolerance):
        h.update(f"{canonical(part)}\0".encode())
    for name in sorted(_composites_used(rule, library.ops)):
        h.update(f"op {canonical(library.ops[name].body)}\0".encode())
    guard = canonical(rule.guard)
    if "has_target" in guard or "TargetParam(" in guard:  # the targets it may see
        from cuvil.ir.devices import known_devices

        h.update(" ".join(sorted(known_devices() | set(library.targets))).encode())
    return "rule-" + h.hexdigest()


def sources_key(texts: list[tuple[str, str]], disable: tuple[str, ...],
                stock: str) -> str:
    """The key of a rule set: its `(path, text)` sources, with `disable`, against the stock
    library of hash `stock`."""
    h = hashlib.blake2b(digest_size=20)
    h.update(f"{verifier_version()}\0{stock}\0{sorted(disable)}\0".encode())
    for path, text in texts:
        h.update(f"{path}\0{text}\0".encode())
    return "set-" + h.hexdigest()


def canonical(node: Any) -> str:
    """An AST node as text without its positions and descriptions: equal meaning, equal
    text."""
    if is_dataclass(node):
        inner = ",".join(f"{f.name}={canonical(getattr(node, f.name))}" for f in fields(node)
                         if f.name not in ("pos", "key_pos", "description"))
        return f"{type(node).__name__}({inner})"
    if isinstance(node, tuple | list):
        return "(" + ",".join(canonical(x) for x in node) + ")"
    return repr(node)


def _composites_used(rule, ops: dict) -> set[str]:
    """The composite ops `rule` calls, directly or through the bodies of others."""
    found: set[str] = set()
    pending = [rule.lhs, rule.rhs]
    while pending:
        term = pending.pop()
        op = getattr(term, "op", None)
        if op is None:
            continue
        pending += [*term.args, *(value for _, value in term.kwargs)]
        if op in ops and op not in found:
            found.add(op)
            pending.append(ops[op].body.body)
    return found


def _file(key: str):
    return cache_dir() / "rules" / "verdicts" / f"{key}.json"


def recall(key: str) -> dict | None:
    """The record kept under `key`, or None."""
    if key not in _IN_PROCESS:
        try:
            _IN_PROCESS[key] = json.loads(_file(key).read_text())
        except (OSError, ValueError):
            return None
    return _IN_PROCESS[key]


def keep(key: str, record: dict) -> None:
    """Keep `record` under `key`, in the process and on disk (if the cache is writable)."""
    _IN_PROCESS[key] = record
    with contextlib.suppress(OSError):
        write_text(_file(key), json.dumps(record, sort_keys=True))
