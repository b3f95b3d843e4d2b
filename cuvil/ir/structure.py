"""A graph's output structure: value names in tuples, lists and dicts (plain data, so the
runtime rebuilds outputs without the IR)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

Structure = Any  # a value name, or a tuple / list / dict of structures


def flatten(structure: Structure) -> Iterator[str]:
    if isinstance(structure, str):
        yield structure
    elif isinstance(structure, dict):
        for v in structure.values():
            yield from flatten(v)
    else:
        for v in structure:
            yield from flatten(v)


def map_names(structure: Structure, fn) -> Any:
    if isinstance(structure, str):
        return fn(structure)
    if isinstance(structure, dict):
        return {k: map_names(v, fn) for k, v in structure.items()}
    return type(structure)(map_names(v, fn) for v in structure)


def unflatten(structure: Structure, values: dict[str, Any]) -> Any:
    """Rebuild `structure` with each value name replaced by `values[name]`."""
    return map_names(structure, values.__getitem__)
