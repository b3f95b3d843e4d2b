"""The model's own output structure: what a compiled model returns in place of the graph's
plain tuples, lists and dicts (a `ModelOutput`, a namedtuple, a transformers cache).

A graph's `output_structure` holds value names in tuples, lists and dicts; when the torch
model returned other containers, the importer also attaches an `OutputTree`: torch.export's
output pytree spec, whose leaves are the graph's outputs in `flatten` order. It pickles in a
portable form (torch's `treespec_dumps` text when torch can write it, else the spec itself)
and loads the spec again on first use.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import pickle
from typing import Any

from torch.utils import _pytree as pytree

from cuvil.errors import CuvilError

_PLAIN = (tuple, list, dict)


def needs_tree(spec: pytree.TreeSpec) -> bool:
    """Whether `spec` holds containers other than plain tuples, lists and dicts."""
    if spec.is_leaf():
        return False
    if spec.type not in _PLAIN:
        return True
    return any(needs_tree(child) for child in spec.children())


class OutputTree:
    """torch's output spec of a model; `rebuild(leaves)` makes the model's output."""

    def __init__(self, spec: pytree.TreeSpec | None = None, text: str | None = None):
        """From torch's spec, or from its text (`text()`: the spec is read on first use)."""
        self._spec: pytree.TreeSpec | None = spec
        self._text: str | None = text

    @property
    def spec(self) -> pytree.TreeSpec:
        if self._spec is None:
            self._spec = _loads(self._text or "")
        return self._spec

    def rebuild(self, leaves: list[Any]) -> Any:
        return pytree.tree_unflatten(leaves, self.spec)

    def text(self) -> str | None:
        """torch's text of the spec (`treespec_dumps`), None where torch cannot write it."""
        if self._text is None:
            self._text = _dumps(self.spec)
        return self._text

    def __getstate__(self) -> dict[str, Any]:
        if self._text is None:
            self._text = _dumps(self.spec)
        if self._text is not None:
            return {"text": self._text}
        try:  # a spec torch cannot write (a namedtuple it does not know): pickle the spec
            pickle.dumps(self._spec)
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            raise CuvilError(f"the model's output structure cannot be saved: {e}") from None
        return {"spec": self._spec}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._text = state.get("text")
        self._spec = state.get("spec")

    def __repr__(self) -> str:
        return f"OutputTree({self.spec})"


def _dumps(spec: pytree.TreeSpec) -> str | None:
    try:
        return pytree.treespec_dumps(spec)
    except (NotImplementedError, TypeError, ValueError, KeyError):
        return None


def _loads(text: str) -> pytree.TreeSpec:
    """The spec of `text`; the modules of its container types are imported first (a
    `ModelOutput` class registers itself with torch when its module is imported)."""
    for name in _type_names(json.loads(text)):
        module = name.rpartition(".")[0]
        if module:
            with contextlib.suppress(ImportError):
                importlib.import_module(module)
    try:
        return pytree.treespec_loads(text)
    except (NotImplementedError, TypeError, ValueError, KeyError) as e:
        raise CuvilError(f"cannot rebuild the model's output structure: {e} (register its "
                         "container types with torch.utils._pytree first)") from None


def _type_names(node: Any) -> list[str]:
    """Every `type` string in torch's JSON form of a spec."""
    if isinstance(node, dict):
        found = [node["type"]] if isinstance(node.get("type"), str) else []
        return found + [n for v in node.values() for n in _type_names(v)]
    if isinstance(node, list):
        return [n for v in node for n in _type_names(v)]
    return []
