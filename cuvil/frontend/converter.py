"""What an aten converter is: the value it builds, how it declines, its arguments.

A converter gets the importer and the op's arguments by schema name and returns a `Value`
(or a tuple of them); arguments it cannot map make it raise `Fallback` (`need` says so in
one line), and the op runs through torch instead. The converters themselves are in `aten`
(values, math, networks) and `aten_shape` (shapes and views).
"""

from __future__ import annotations

from typing import Any

Args = dict[str, Any]


class Value(str):
    """The name of a tensor value in the graph being built (other arguments are Python)."""


class Fallback(Exception):
    """These arguments have no catalog form: run the op through torch instead."""


def need(cond: bool, why: str) -> None:
    """Fall back to torch, saying `why`, unless `cond`."""
    if not cond:
        raise Fallback(why)
