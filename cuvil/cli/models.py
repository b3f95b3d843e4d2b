"""MODEL arguments of the command line: what the user names, loaded as a model to import.

    zoo:mlp                   a model of cuvil.zoo (with its example inputs)
    model.pt2                 a file saved by torch.export.save
    package.module:factory    a function returning (model, example_inputs)
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from cuvil.errors import CuvilError

FORMS = "zoo:NAME, a .pt2 file, or package.module:factory"


def load_model(spec: str) -> tuple[Any, tuple]:
    """`(model, example_inputs)` for `spec`; a .pt2 file has no examples (it needs none)."""
    if spec.startswith("zoo:"):
        from cuvil import zoo

        return zoo.get(spec[4:])
    if spec.endswith(".pt2"):
        if not os.path.isfile(spec):
            raise CuvilError(f"{spec}: no such file")
        return spec, ()
    if ":" in spec:
        return _from_factory(spec)
    raise CuvilError(f"cannot load model {spec!r}: expected {FORMS}")


def _from_factory(spec: str) -> tuple[Any, tuple]:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise CuvilError(f"{spec}: cannot import module {module_name!r} ({e})") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise CuvilError(f"{spec}: module {module_name!r} has no function {attr!r}")
    try:
        result = factory()
    except Exception as e:  # the user's code: report it in one line
        raise CuvilError(f"{spec}: {attr}() failed: {type(e).__name__}: {e}") from None
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CuvilError(f"{spec}: {attr}() must return (model, example_inputs)")
    model, inputs = result
    return model, tuple(inputs) if isinstance(inputs, tuple | list) else (inputs,)
