"""Checked rule libraries: `load(source)` reads `.cvr` rules into a `RuleLibrary`.

`load(None)` is the stock library (the top-level `rules/`); a string containing a newline is
`.cvr` text; any other string or a `Path` is a file or directory that must exist.

The names load on first use, so that importing the package (as `cuvil.verify.gate`'s warm
path does) needs neither the AST nor the op catalog.
"""

from __future__ import annotations

__all__ = ["CheckedRule", "RuleLibrary", "load"]


def __getattr__(name: str):
    if name == "load":
        from cuvil.library.loader import load as value
    elif name in ("CheckedRule", "RuleLibrary"):
        from cuvil.library import checked

        value = getattr(checked, name)
    else:
        raise AttributeError(f"module 'cuvil.library' has no attribute {name!r}")
    globals()[name] = value
    return value
