"""Rule verification: is each rewrite sound on random, valid instances of its left side?

    report = verify(cuvil.library.load("rules/"), seed=0)
    print(report)            # one line per rule: verified (n), UNSOUND + counterexample,
                             # or unverified: reason

`shapes*.py` build valid input shapes per op, `instances.py` random instances of a rule's
left-hand side, `guards.py` evaluates guards over them, `compare.py` compares the two sides,
`verifier.py` drives it all. `gate.py` verifies user rules before a compile uses them, and
`verdicts.py` keeps each verdict. The command is `cuvil rules verify` (`cuvil/cli/rules.py`).

Names load on first use: the pipeline imports this package at the top, and only a compile
with user rules loads the verifier (`check_rules`, from `gate.py`).
"""

__all__ = ["UNSOUND", "UNVERIFIED", "VERIFIED", "Counterexample", "RuleResult",
           "VerifyReport", "check_rules", "verify", "verify_rule"]


def __getattr__(name: str):
    if name == "check_rules":
        from cuvil.verify.gate import check_rules

        return check_rules
    if name not in __all__:
        raise AttributeError(f"module 'cuvil.verify' has no attribute {name!r}")
    from cuvil.verify import verifier

    return getattr(verifier, name)
