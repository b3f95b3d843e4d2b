"""The ONNX importer: walks an ONNX graph and builds the Cuvil graph and its import report.

Graph inputs become `input` nodes whose `dim_param`s are Cuvil symbolic dims (a dim with
neither a value nor a name is named `<input>_d<i>`); initializers become constants held by
reference (weights). Each node is either computed at import, when all its inputs are known
and `fold.FOLD` has it (shape arithmetic, `Constant`), or built from catalog ops by its
converter in `ops.ONNX`. A node with neither is a one-line `CuvilError` naming the node,
its op type and the opset.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import cuvil.ops.registry  # noqa: F401  (installs the op catalog, which types the nodes built)
from cuvil.errors import CuvilError, ShapeError
from cuvil.frontend.converter import Value
from cuvil.frontend.report import ImportReport
from cuvil.ir.graph import Graph, _ident
from cuvil.ir.types import DType, TensorType, sym
from cuvil.onnx.fold import FOLD, NotFoldable, dims_array, is_symbolic, tidy
from cuvil.onnx.load import DEFAULT_DOMAINS, opset_of, read_model

# ONNX TensorProto element types -> Cuvil dtypes
_DTYPES = {1: DType.f32, 2: DType.u8, 3: DType.i8, 6: DType.i32, 7: DType.i64, 9: DType.bool,
           10: DType.f16, 11: DType.f64, 16: DType.bf16}


class Unsupported(Exception):
    """A converter cannot map this node's attributes or inputs; the message says which."""


def need(cond: bool, why: str) -> None:
    if not cond:
        raise Unsupported(why)


def dtype_of(elem_type: int, where: str) -> DType:
    if elem_type not in _DTYPES:
        raise CuvilError(f"{where}: ONNX element type {elem_type} has no Cuvil dtype")
    return _DTYPES[elem_type]


class OnnxImporter:
    def __init__(self, model: Any, name: str):
        self.model = model
        self.opset = opset_of(model, name)
        self.graph = Graph(_ident(name))
        self.report = ImportReport(name)
        self.env: dict[str, Value] = {}  # ONNX value name -> graph value
        self.known: dict[str, np.ndarray] = {}  # ONNX value name -> value known at import
        self.weights: set[str] = set()  # the initializers
        self.node: Any = None
        self.attrs: dict[str, Any] = {}

    # -- the walk ---------------------------------------------------------------------------
    def build(self) -> Graph:
        from onnx import numpy_helper

        g = self.model.graph
        for init in g.initializer:
            try:
                self.known[init.name] = numpy_helper.to_array(init)
            except (ValueError, TypeError) as e:
                raise CuvilError(f"{self.report.model}: initializer {init.name!r} is "
                                 f"malformed ({e})") from None
            self.weights.add(init.name)
        for value in g.input:
            if value.name not in self.known:
                self.env[value.name] = self.input(value)
        for node in g.node:
            self.convert(node)
        outs = [str(self.tensor(v.name)) for v in g.output]
        if not outs:
            raise CuvilError(f"{self.report.model}: the ONNX graph has no outputs")
        self.graph.set_outputs(outs[0] if len(outs) == 1 else tuple(outs))
        graph = self.graph.prune()
        self.report.nodes = len(graph)
        graph.import_report = self.report
        return graph.verify()

    def input(self, value: Any) -> Value:
        where = f"ONNX input {value.name!r}"
        t = value.type.tensor_type
        if not value.type.HasField("tensor_type"):
            raise CuvilError(f"{where}: not a tensor")
        shape = []
        for i, d in enumerate(t.shape.dim):
            if d.HasField("dim_value"):
                shape.append(d.dim_value)
                continue
            name = _ident(d.dim_param) if d.dim_param else f"{_ident(value.name)}_d{i}"
            self.report.dynamic_dims.setdefault(name, f"{value.name} dim {i}")
            shape.append(sym(name))
        ttype = TensorType(tuple(shape), dtype_of(t.elem_type, where))
        return Value(self.graph.input(self.unique(_ident(value.name)), ttype))

    def convert(self, node: Any) -> None:
        from onnx import helper

        from cuvil.onnx.ops import ONNX

        self.node = node
        self.attrs = {a.name: _attr(helper.get_attribute_value(a)) for a in node.attribute}
        if node.domain not in DEFAULT_DOMAINS:
            raise CuvilError(f"{self.where()} has no Cuvil mapping (domain {node.domain!r})")
        if self.fold(node):
            return
        convert = ONNX.get(node.op_type)
        if convert is None:
            raise CuvilError(f"{self.where()} has no Cuvil mapping")
        try:
            result = convert(self, list(node.input))
        except Unsupported as e:
            raise CuvilError(f"{self.where()}: {e}") from None
        except ShapeError as e:  # the catalog's message names the node (its source)
            raise CuvilError(str(e)) from None
        results = result if isinstance(result, tuple | list) else (result,)
        for name, value in zip(node.output, results, strict=False):
            if name and value is not None:
                self.env[name] = value

    def fold(self, node: Any) -> bool:
        """Compute `node` at import when its inputs are known; whether it did."""
        if node.op_type in ("Shape", "Size", "Constant"):
            self.set_known(node.output, [self.shape_value(node)])
            return True
        inputs = [self.known.get(i) if i else None for i in node.input]
        if node.op_type not in FOLD or any(i and self.known.get(i) is None for i in node.input):
            return False
        try:
            values = FOLD[node.op_type](self.attrs, inputs)
        except NotFoldable:
            return False
        self.set_known(node.output, values)
        return True

    def shape_value(self, node: Any) -> np.ndarray:
        if node.op_type == "Constant":
            return _constant(self.attrs, self.where())
        shape = self.shape_of(node.input[0])
        if node.op_type == "Size":
            return np.asarray(np.prod(np.asarray(shape, dtype=object)))
        start, end = self.attrs.get("start", 0), self.attrs.get("end")
        return dims_array(shape[start:end])

    def set_known(self, names: Any, values: list) -> None:
        for name, value in zip(names, values, strict=False):
            if name:
                self.known[name] = tidy(value)

    # -- what converters use ---------------------------------------------------------------
    def where(self) -> str:
        node = self.node
        return f"ONNX node {node.name or node.output[0]!r} ({node.op_type}, opset {self.opset})"

    def add(self, op: str, inputs: list[Value], attrs: dict | None = None) -> Value:
        name = self.graph.fresh(op + "_")
        return Value(self.graph.add(op, [str(i) for i in inputs], attrs or {}, name=name,
                                    source=self.where()))

    def tensor(self, name: str) -> Value:
        """The graph value of ONNX value `name`; a known one becomes a constant (a weight by
        reference, a folded value as a new constant, a 0-d float as a `scalar`)."""
        if name in self.env:
            return self.env[name]
        if name not in self.known:
            raise CuvilError(f"ONNX value {name!r} is used but never defined")
        arr = self.known[name]
        if is_symbolic(arr):
            raise CuvilError(f"{self.where()}: value {name!r} holds symbolic sizes and cannot "
                             "be a tensor")
        if arr.ndim == 0 and arr.dtype.kind in "fb":
            value = arr.item()
            self.env[name] = Value(self.graph.scalar(value, np_dtype(arr.dtype)))
        else:
            tensor = torch.from_numpy(np.ascontiguousarray(arr).copy() if not
                                      arr.flags.writeable else np.ascontiguousarray(arr))
            ref = name if name in self.weights else f"folded.{name}"
            node = self.unique(_ident(ref))
            self.env[name] = Value(self.graph.const(tensor, ref=ref, name=node))
        return self.env[name]

    def scalar(self, value: float) -> Value:
        return Value(self.graph.scalar(float(value)))

    def value(self, names: list[str], i: int) -> Value | None:
        """Input `i` of the node as a graph value; None where it is absent."""
        return self.tensor(names[i]) if i < len(names) and names[i] else None

    def constant(self, names: list[str], i: int) -> np.ndarray | None:
        """Input `i` of the node if it is known at import, else None."""
        return self.known.get(names[i]) if i < len(names) and names[i] else None

    def type(self, value: Value) -> TensorType:
        return self.graph.type_of(value)

    def shape_of(self, name: str) -> tuple:
        if name in self.env:
            return self.type(self.env[name]).shape
        if name in self.known:
            return self.known[name].shape
        raise CuvilError(f"ONNX value {name!r} is used but never defined")

    def unique(self, name: str) -> str:
        return name if name not in self.graph.nodes else self.graph.fresh(name + "_")


def _attr(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [_attr(v) for v in value]
    return value


def np_dtype(dtype: np.dtype) -> DType:
    for d in DType:
        if d is not DType.bf16 and d.numpy == dtype:
            return d
    raise CuvilError(f"numpy dtype {dtype} has no Cuvil dtype")


def _constant(attrs: dict[str, Any], where: str) -> np.ndarray:
    from onnx import numpy_helper

    if "value" in attrs:
        return numpy_helper.to_array(attrs["value"])
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    raise CuvilError(f"{where}: a Constant of {', '.join(attrs) or 'nothing'} is not read")


def from_onnx(model: Any) -> Graph:
    """The Cuvil graph of an ONNX model: a `.onnx` path, its bytes or an `onnx.ModelProto`."""
    import os

    proto = read_model(model)
    if isinstance(model, str | os.PathLike):
        name = os.path.splitext(os.path.basename(os.fspath(model)))[0]
    else:
        name = proto.graph.name or "onnx_model"
    return OnnxImporter(proto, name).build()
