"""Rule verification: is each rewrite sound on random, valid instances of its left side?

    report = verify(cuvil.library.load("rules/"), seed=0)
    print(report)            # one line per rule: verified (n), UNSOUND + counterexample,
                             # or unverified: reason

`shapes*.py` build valid input shapes per op, `instances.py` random instances of a rule's
left-hand side, `guards.py` evaluates guards over them, `compare.py` compares the two sides,
`verifier.py` drives it all. `gate.py` verifies user rules before a compile uses them, and
`verdicts.py` keeps each verdict. The command is `cuvil rules verify` (`cuvil/cli/rules.py`).
"""

from cuvil.verify.verifier import (
    UNSOUND,
    UNVERIFIED,
    VERIFIED,
    Counterexample,
    RuleResult,
    VerifyReport,
    verify,
    verify_rule,
)

__all__ = ["UNSOUND", "UNVERIFIED", "VERIFIED", "Counterexample", "RuleResult",
           "VerifyReport", "verify", "verify_rule"]
