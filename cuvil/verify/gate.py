"""The gate every user rule passes before a compile or optimize uses it: verified, or refused.

The stock library's rules are verified by CI (`tests/verify/test_stock_rules.py`), so a
rule equal to a stock rule (same verdict key: `cuvil/verify/verdicts.py`) passes as it is.
Every other rule of `rules=`, wherever it comes from (a file, a directory, `.cvr` text, a
list of them with the stock library: `["stock", "my.cvr"]`, an `override rule` of a stock
rule), is verified on random instances as `cuvil rules verify` does, once per
installation: sound verdicts are kept by key. A rule found unsound
is refused with its counterexample; one the verifier cannot check (an op without a shape
generator, a guard no instance meets) is refused too, never used unchecked. `verify=False`
uses the rules unverified, and the report says so. A composite `op` is sound by
construction (its body is its meaning, and lowering inlines the body), so only rules are
verified, through the bodies of the ops they use.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any

from cuvil.errors import CuvilError
from cuvil.verify import verdicts

FIX = "fix it or pass verify=False (--no-verify)"


@dataclass(frozen=True)
class RuleCheck:
    """What the gate did: `user` rules used, `cached` of them with a kept verdict;
    `verified` False when the caller opted out."""

    user: int = 0
    cached: int = 0
    verified: bool = True

    def __str__(self) -> str:
        if not self.user:
            return ""
        rules = f"{self.user} user rule{'s' if self.user != 1 else ''}"
        if not self.verified:
            return f"{rules} used unverified"
        return f"verified {rules} ({self.cached} cached)"


def check_rules(rules: Any, disable: tuple[str, ...] = (), verify: bool = True,
                tracer=None) -> RuleCheck:
    """Verify the user rules of `rules` (as `cuvil.library.load` takes it) that remain after
    `disable`; a one-line `CuvilError` naming the first unsound or unverifiable one."""
    if rules is None or rules == "stock":  # the stock library alone
        return RuleCheck()
    stage = tracer.stage("verify rules") if tracer is not None else contextlib.nullcontext()
    with stage:
        return _check(rules, tuple(disable), verify)


def _check(rules: Any, disable: tuple[str, ...], verify: bool) -> RuleCheck:
    from cuvil.dsl.diagnostics import Reporter
    from cuvil.dsl.sources import read_sources, sources_hash

    reporter = Reporter()
    texts = read_sources(rules, reporter)
    set_key = verdicts.sources_key(texts, disable, sources_hash(None))
    record = None if reporter.has_errors else verdicts.recall(set_key)
    if record is not None and (record["verified"] or not verify):
        return RuleCheck(record["user"], record["user"] if verify else 0, verify)
    from cuvil.library import load  # the AST and the op catalog: only when not recorded

    library = load(rules).without(disable)  # a bad file raises its diagnostics here
    stock = stock_keys()
    keys = {r.label: k for r in library.rules if (k := verdicts.rule_key(r, library)) not in stock}
    if not verify:
        if record is None:
            verdicts.keep(set_key, {"user": len(keys), "verified": False})
        return RuleCheck(len(keys), 0, False)
    cached = 0
    for rule in library.rules:
        key = keys.get(rule.label)
        if key is None:
            continue
        if verdicts.recall(key) is not None:
            cached += 1
            continue
        _verify(rule, library)
        verdicts.keep(key, {"rule": rule.label, "where": rule.where})
    verdicts.keep(set_key, {"user": len(keys), "verified": True})
    return RuleCheck(len(keys), cached, True)


@functools.cache
def stock_keys() -> frozenset[str]:
    """The verdict keys of the stock library's rules (CI verifies them)."""
    from cuvil.library import load

    library = load(None)
    return frozenset(verdicts.rule_key(r, library) for r in library.rules)


def _verify(rule, library) -> None:
    """Return if `rule` is verified; raise the one-line refusal if not."""
    from cuvil import verify as verifier

    try:
        result = verifier.verify_rule(rule, library, verdicts.SEED, verdicts.INSTANCES)
    except Exception as e:  # a verifier that cannot handle the rule: not verified either
        raise CuvilError(_unverifiable(rule, f"{type(e).__name__}: {e}")) from None
    if result.status == verifier.VERIFIED:
        return
    if result.status == verifier.UNSOUND:
        raise CuvilError(_unsound(rule, result))
    raise CuvilError(_unverifiable(rule, result.reason))


def _unsound(rule, result) -> str:
    cx = result.counterexample
    lines = cx.lines() if cx is not None else [result.reason]
    inputs, how = lines[:-1], lines[-1]
    at = f" at {', '.join(inputs)}" if inputs else ""
    text = f"{show_term(rule.lhs)} => {show_term(rule.rhs)}"
    return _one_line(f"{rule.where}: rule {rule.label} is unsound: {text} differs{at} "
                     f"({how}); {FIX}")


def _unverifiable(rule, reason: str) -> str:
    return _one_line(f"{rule.where}: rule {rule.label} cannot be verified: {reason}; "
                     f"check it with `cuvil rules verify`, disable it, or pass verify=False "
                     f"(--no-verify) to use it unverified")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def show_term(term) -> str:
    """A rule side as `.cvr` text: `relu(x)`, `linear(x, w, b)`, a scalar as its value."""
    from cuvil.dsl.ast import Call, Wildcard, show

    if isinstance(term, Wildcard):
        return "_"
    if not isinstance(term, Call):
        return show(term)
    if term.op == "scalar":
        return show(dict(term.kwargs)["value"])
    args = [show_term(a) for a in term.args]
    args += [f"{name}={show_term(value)}" for name, value in term.kwargs]
    return f"{term.op}({', '.join(args)})"
