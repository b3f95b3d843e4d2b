"""Rule verification: is each rewrite sound on random, valid instances of its left side?

    report = verify(cuvil.rules.load("rules/"), seed=0)
    print(report)            # one line per rule: verified (n), UNSOUND + counterexample,
                             # or unverified: reason

`shapes*.py` build valid input shapes per op, `instances.py` random instances of a rule's
left-hand side, `guards.py` evaluates guards over them, `compare.py` compares the two sides,
`verify.py` drives it all. The command is `cuvil rules verify` (`cuvil/cli/rules.py`).
"""

from cuvil.rules.verify.verify import (
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
