"""MODEL arguments of the command line: what the user names, loaded as a model to import.

    zoo:mlp                   a model of cuvil.zoo (with its example inputs)
    model.pt2                 a file saved by torch.export.save
    model.onnx                an ONNX model (read by cuvil.onnx)
    package.module:factory    a function returning (model, example_inputs); the module is
                              found on sys.path or in the current directory
    path/to/file.py:factory   the same, from a Python file
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from cuvil.errors import CuvilError

FORMS = "zoo:NAME, a .pt2 or .onnx file, package.module:factory or file.py:factory"


def load_model(spec: str) -> tuple[Any, tuple]:
    """`(model, example_inputs)` for `spec`; a .pt2 or .onnx file has no examples (it needs
    none)."""
    if spec.startswith("zoo:"):
        from cuvil import zoo

        return zoo.get(spec[4:])
    if spec.endswith((".pt2", ".onnx")):
        if not os.path.isfile(spec):
            raise CuvilError(f"{spec}: no such file")
        return spec, ()
    if ":" in spec:
        return _from_factory(spec)
    raise CuvilError(f"cannot load model {spec!r}: expected {FORMS}")


def _from_factory(spec: str) -> tuple[Any, tuple]:
    module_name, _, attr = spec.rpartition(":")
    module = _import(spec, module_name)
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


def _import(spec: str, name: str):
    """The module `name` (dotted, or a `.py` path), its import errors as one line."""
    try:
        if name.endswith(".py"):
            return _import_file(spec, Path(name))
        if os.getcwd() not in sys.path:  # like `python -m`: the current directory first
            sys.path.insert(0, os.getcwd())
        return importlib.import_module(name)
    except CuvilError:
        raise
    except ImportError as e:
        raise CuvilError(f"{spec}: cannot import module {name!r} ({e})") from None
    except Exception as e:  # the user's module failed while importing
        raise CuvilError(f"{spec}: importing {name!r} failed: {type(e).__name__}: "
                         f"{e}") from None


def _import_file(spec: str, path: Path):
    if not path.is_file():
        raise CuvilError(f"{spec}: no such file {str(path)!r}")
    loader_spec = importlib.util.spec_from_file_location(f"cuvil_user_{path.stem}", path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[loader_spec.name] = module
    loader_spec.loader.exec_module(module)
    return module
