"""Checked rule libraries: `load(source)` reads `.cvr` rules into a `RuleLibrary`.

`load(None)` is the stock library (the top-level `rules/`); a string containing a newline is
`.cvr` text; any other string or a `Path` is a file or directory that must exist.
"""

from cuvil.rules.library import CheckedRule, RuleLibrary
from cuvil.rules.loader import load

__all__ = ["CheckedRule", "RuleLibrary", "load"]
