"""Checked rule libraries: `load(source)` reads `.cvr` rules into a `RuleLibrary`.

`load(None)` is the stock library (the top-level `rules/`); a string containing a newline is
`.cvr` text; any other string or a `Path` is a file or directory that must exist.

The names load on first use, so that a submodule that needs neither the AST nor the op
catalog (`verdicts`, `gate`'s warm path) imports without them.
"""

from __future__ import annotations

import importlib

_LAZY = {"CheckedRule": "cuvil.rules.library", "RuleLibrary": "cuvil.rules.library",
         "load": "cuvil.rules.loader"}

__all__ = ["CheckedRule", "RuleLibrary", "load"]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'cuvil.rules' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value
