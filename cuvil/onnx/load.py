"""Reading an ONNX model: a path, raw bytes or an `onnx.ModelProto` in, a checked proto out.

Every way a file can be unreadable is a one-line `CuvilError` naming it: no such file, a
truncated or malformed protobuf, no graph, an opset older than the importer reads (the op
semantics it maps are those of opset `MIN_OPSET` and later), an external-data tensor whose
file is missing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cuvil.errors import CuvilError

MIN_OPSET = 13  # Softmax on one axis, Squeeze/Unsqueeze/Split/ReduceSum axes as inputs
DEFAULT_DOMAINS = ("", "ai.onnx")


def is_onnx(model: Any) -> bool:
    """Whether `model` names an ONNX model: a `.onnx` path or an `onnx.ModelProto`."""
    if isinstance(model, str | os.PathLike):
        return os.fspath(model).lower().endswith(".onnx")
    return type(model).__name__ == "ModelProto" and type(model).__module__.startswith("onnx")


def read_model(model: Any) -> Any:
    """The `onnx.ModelProto` of `model` (a path, bytes or a proto), its opset checked."""
    try:
        import onnx
    except ImportError:
        raise CuvilError("reading an ONNX model needs the onnx package (pip install "
                         "onnx)") from None

    if isinstance(model, onnx.ModelProto):
        where = model.graph.name or "the ONNX model"
    elif isinstance(model, bytes):
        where, model = "the ONNX bytes", _parse(model, "the ONNX bytes")
    elif isinstance(model, str | os.PathLike):
        where, model = os.fspath(model), _read_file(Path(model))
    else:
        raise CuvilError(f"cannot read an ONNX model from a {type(model).__name__}")
    if not model.HasField("graph"):
        raise CuvilError(f"{where}: not an ONNX model (no graph)")
    opset_of(model, where)
    return model


def _read_file(path: Path) -> Any:
    import onnx

    if not path.is_file():
        raise CuvilError(f"{path}: no such file")
    proto = _parse(path.read_bytes(), str(path))
    try:
        onnx.external_data_helper.load_external_data_for_model(proto, str(path.parent))
    except (OSError, ValueError) as e:
        raise CuvilError(f"{path}: cannot read its external data ({e})") from None
    return proto


def _parse(data: bytes, where: str) -> Any:
    import onnx
    from google.protobuf.message import DecodeError

    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeWarning, ValueError) as e:
        raise CuvilError(f"{where}: not a readable ONNX file (truncated or malformed: "
                         f"{str(e) or type(e).__name__})") from None
    if not data or not proto.HasField("graph"):
        raise CuvilError(f"{where}: not a readable ONNX file (truncated or malformed: "
                         "no graph)")
    return proto


def opset_of(model: Any, where: str = "the ONNX model") -> int:
    """The model's opset of the default domain, refused when older than `MIN_OPSET`."""
    versions = [o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS]
    if not versions:
        raise CuvilError(f"{where}: imports no opset of the default ONNX domain")
    version = max(versions)
    if version < MIN_OPSET:
        raise CuvilError(f"{where}: opset {version} is older than Cuvil reads (opset "
                         f"{MIN_OPSET} or later; onnx.version_converter can convert it)")
    return version
