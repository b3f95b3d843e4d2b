"""The ONNX exporter: an optimized Cuvil graph out as an ONNX model for ONNX Runtime.

    graph = cuvil.optimize(model, inputs)
    cuvil.onnx.to_onnx(graph, "model.onnx")

Composite ops (`op NAME(params) = BODY` in `.cvr`) are first replaced by the catalog ops of
their bodies (`cuvil.lower.inline`, the same expansion lowering uses: one source of truth);
each catalog op is then written as standard ONNX ops by its emitter in `export_ops`. A
fused op that ONNX Runtime computes as one op (`FusedConv`, `BiasGelu` in `com.microsoft`,
a `Conv` with a bias) is left whole and written so by `export_contrib` (`contrib=False`:
standard ops only).
Constants become initializers, a symbolic dim becomes a `dim_param` named like its symbol,
and a shape that holds one is computed at run time from the input that carries it. An op
with no emitter is a one-line `CuvilError` naming the node and the op. The file is written
atomically.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import sympy

import cuvil.ops.registry  # noqa: F401  (installs the op catalog, which types the inlined nodes)
from cuvil.atomic import write_bytes
from cuvil.errors import CuvilError
from cuvil.ir.graph import Graph, Node
from cuvil.ir.types import DType, format_dim, is_static
from cuvil.lower.inline import inline_composites

OPSET = 20  # Gelu joined the default domain at 20
IR_VERSION = 9

# Cuvil dtypes -> ONNX TensorProto element types
ELEM = {DType.f32: 1, DType.u8: 2, DType.i8: 3, DType.i32: 6, DType.i64: 7, DType.bool: 9,
        DType.f16: 10, DType.f64: 11, DType.bf16: 16}


class Writer:
    """The ONNX graph being built: nodes, initializers, and the ONNX name of each value."""

    def __init__(self, graph: Graph):
        from onnx import helper

        self.helper = helper
        self.graph = graph
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.node: Node | None = None  # the Cuvil node being written (for error messages)
        self._count = 0
        self._consts: dict[tuple, str] = {}
        self._symbols = _symbol_sources(graph)

    def fresh(self, hint: str = "t") -> str:
        self._count += 1
        return f"_cv_{hint}{self._count}"

    def add(self, op_type: str, inputs: list[str], out: str | None = None,
            domain: str = "", **attrs: Any) -> str:
        """Append one ONNX node; returns its output name (`out` or a fresh one)."""
        out = out or self.fresh(op_type.lower())
        name = f"{self.node.name}/{op_type}{self._count}" if self.node else out
        self._count += 1
        self.nodes.append(self.helper.make_node(op_type, inputs, [out], name=name,
                                                domain=domain or None, **attrs))
        return out

    # -- values ---------------------------------------------------------------------------
    def dtype(self, name: str) -> DType:
        return self.graph.type_of(name).dtype

    def arg(self, name: str, dtype: DType | None = None) -> str:
        """The ONNX name of value `name` in `dtype` (a scalar is a constant of it, any other
        value of another dtype is cast)."""
        node = self.graph[name]
        dtype = dtype or node.type.dtype
        if node.op == "scalar":
            return self.constant(node.attrs["value"], dtype)
        if node.type.dtype != dtype:
            return self.add("Cast", [name], to=ELEM[dtype])
        return name

    def constant(self, value: Any, dtype: DType, shape: tuple[int, ...] = ()) -> str:
        """An initializer holding `value` (a number or a nested list) as `dtype`."""
        key = (repr(value), dtype, shape)
        if key not in self._consts:
            array = np.asarray(value, dtype=dtype.numpy).reshape(shape)
            self._consts[key] = self.initializer(array)
        return self._consts[key]

    def ints(self, values: list[int]) -> str:
        return self.constant(list(values), DType.i64, (len(values),))

    def initializer(self, array: np.ndarray, name: str | None = None) -> str:
        from onnx import numpy_helper

        name = name or self.fresh("c")
        array = np.ascontiguousarray(array).reshape(array.shape)  # keeps a 0-d array 0-d
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def shape(self, dims: tuple) -> str:
        """A 1-D int64 tensor of `dims`; symbolic dims are read off the inputs at run time."""
        if all(is_static(d) for d in dims):
            return self.ints(list(dims))
        parts = [self.ints([d]) if is_static(d) else self.dim(d) for d in dims]
        return parts[0] if len(parts) == 1 else self.add("Concat", parts, axis=0)

    def dim(self, d: sympy.Expr) -> str:
        """A 1-element int64 tensor computing symbolic dim `d` (sums and products of
        symbols and integers)."""
        if d.is_Integer:
            return self.ints([int(d)])
        if isinstance(d, sympy.Symbol) and d.name in self._symbols:
            value, axis = self._symbols[d.name]
            return self.add("Shape", [value], start=axis, end=axis + 1)
        if isinstance(d, (sympy.Add, sympy.Mul)):
            parts = [self.dim(a) for a in d.args]
            op = "Add" if isinstance(d, sympy.Add) else "Mul"
            out = parts[0]
            for p in parts[1:]:
                out = self.add(op, [out, p])
            return out
        raise self.unsupported(f"symbolic dim {format_dim(d)} cannot be computed in ONNX")

    def unsupported(self, why: str) -> CuvilError:
        where = self.node.where() if self.node else self.graph.name
        return CuvilError(f"cannot export node {where} to ONNX: {why}")


def _symbol_sources(graph: Graph) -> dict[str, tuple[str, int]]:
    """Each symbol that is a whole dim of an input: (that input, the axis)."""
    found: dict[str, tuple[str, int]] = {}
    for name in graph.inputs:
        for axis, d in enumerate(graph.type_of(name).shape):
            if isinstance(d, sympy.Symbol):
                found.setdefault(d.name, (name, axis))
    return found


def value_info(name: str, graph: Graph, helper) -> Any:
    t = graph.type_of(name)
    dims = [d if is_static(d) else format_dim(d) for d in t.shape]
    return helper.make_tensor_value_info(name, ELEM[t.dtype], dims)


def to_onnx(graph: Graph, path: str | os.PathLike | None = None, *, opset: int = OPSET,
            contrib: bool = True):
    """`graph` as an `onnx.ModelProto`, also written to `path` (atomically) when given.
    `contrib`: a fused op that ONNX Runtime computes as one op (`export_contrib`) is written
    as that op; else every fused op is expanded into standard ops."""
    try:
        from onnx import helper
    except ImportError:
        raise CuvilError("writing an ONNX model needs the onnx package (pip install "
                         "onnx)") from None

    from cuvil.onnx import export_contrib
    from cuvil.onnx.export_ops import emit

    graph = graph.prune()
    flat, _ = inline_composites(export_contrib.mark(graph) if contrib else graph)
    w = Writer(flat)
    for node in flat:
        w.node = node
        if node.op == "const":
            w.initializer(_array(flat, node), node.name)
        elif node.op.startswith(export_contrib.PREFIX):
            export_contrib.emit(w, node)
        elif node.op not in ("input", "scalar"):
            emit(w, node)
    w.node = None
    outputs = _outputs(w, flat, helper)
    onnx_graph = helper.make_graph(w.nodes, flat.name, [value_info(i, flat, helper)
                                                        for i in flat.inputs],
                                   outputs, _used(w.initializers, w.nodes))
    domains = sorted({n.domain for n in w.nodes} - {""})
    model = helper.make_model(onnx_graph, producer_name="cuvil", opset_imports=[
        helper.make_opsetid("", opset), *(helper.make_opsetid(d, 1) for d in domains)])
    model.ir_version = IR_VERSION
    if path is not None:
        write_bytes(path, model.SerializeToString())
    return model


def _used(initializers: list[Any], nodes: list[Any]) -> list[Any]:
    """The initializers some node reads (a fused op's bias, reshaped into one of its own,
    leaves the original unread; ONNX Runtime warns of each)."""
    read = {name for node in nodes for name in node.input}
    return [t for t in initializers if t.name in read]


def _array(graph: Graph, node: Node) -> np.ndarray:
    tensor = graph.constants[node.attrs["ref"]]
    if node.type.dtype == DType.bf16:
        raise CuvilError(f"cannot export node {node.where()} to ONNX: bf16 constants")
    return tensor.detach().cpu().contiguous().numpy()


def _outputs(w: Writer, graph: Graph, helper) -> list[Any]:
    """The graph's outputs, each a distinct ONNX name (an output that is an input, a
    constant, a scalar or another output again is copied by an Identity)."""
    result, seen = [], set(graph.inputs)
    for i, name in enumerate(graph.outputs):
        node = graph[name]
        if name in seen or node.op in ("const", "scalar"):
            out = f"output{i}"
            while out in graph.nodes:
                out = "_" + out
            w.add("Identity", [w.arg(name)], out=out)
            info = value_info(name, graph, helper)
            info.name = out
            result.append(info)
        else:
            result.append(value_info(name, graph, helper))
        seen.add(name)
    return result
