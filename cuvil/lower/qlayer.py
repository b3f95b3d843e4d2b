"""The int8 layer the quantization rules make, recognised in an inlined composite:

    quantize?(relu?(add?(mul(dequantize(P(quantize?(x, scale=sx, zero_point=zx), wq),
                                        scale=s), ws), b)), scale=sy, zero_point=zy)

with P `matmul_i8` (wq int8 [K, N], ws and b f32 over N) or `conv2d_i8` (NCHW, groups 1,
wq int8 [OC, C, KH, KW], ws and b f32 [OC, 1, 1]); wq, ws and b constants, x f32. The int8
kernels (`cuvil.targets.cpu.kernels.int8`) compute exactly this in one call: quantize x, the u8 x s8
product with int32 sums, and `sum * s * ws + b` (then ReLU) written as f32. Between int8
layers (`rules/quantize/requant.cvr`) the input may be u8 already (no inner quantize: the
previous layer requantized it) and the output requantized to u8 (the outer quantize): the
kernels' requantize epilogue writes it.

The packed weight is the runtime's format: the templates declare its arrays (`packed_types`)
and the runtime's build step computes them (`cuvil.runtime.derived`), which checks that
they have the declared types.

The family of a layer's kernel is its op's `.cvr` clause (`kernel qgemm`, `kernel qconv`);
`match` decides only what is structural: which nodes are the layer's parts, and that they
are a layer the int8 kernels compute (the product's op, `PRODUCTS`, says which of the two
kernels that is). Partitioning asks it of an instance declared `qgemm` or `qconv` (one
group when the product's family is the declared one), and the templates ask it again for
the parts they lower, so a group gets the template only when the template accepts it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cuvil.ir.graph import Graph, Node
from cuvil.ir.types import DType, TensorType
from cuvil.lower.physical import is_identity_layout

PRODUCTS = {"matmul_i8": "qgemm", "conv2d_i8": "qconv"}
EPILOGUE_OPS = ("dequantize", "mul", "add", "relu")
MAX_K = 65536  # |sum (x - zx) w| <= K * 255 * 128 must fit the kernels' int32 sums
PACK_COLUMNS = 16  # the packed weight's columns are padded to a multiple of this


def packed_types(k: int, n: int) -> dict[str, TensorType]:
    """The arrays the int8 kernels take for a [K, N] weight prepared for a static input
    quantization: the weight in panels (K padded to 4, N to `PACK_COLUMNS`), the
    accumulators' start per padded column, the column scales and the bias."""
    kb, npad = (k + 3) // 4, -(-n // PACK_COLUMNS) * PACK_COLUMNS
    return {"qdata": TensorType((4 * kb * npad,), DType.i8),
            "qstart": TensorType((npad,), DType.i32),
            "qscale": TensorType((n,), DType.f32), "qbias": TensorType((n,), DType.f32)}


@dataclass(frozen=True)
class Int8Layer:
    """The parts of one int8 layer (node names, and what the kernel needs of them)."""

    template: str  # "qgemm" or "qconv"
    quantize: Node | None  # None: the input is u8 already
    product: Node
    scale: str  # ws, the weight's scale per output channel (a constant)
    bias: str | None  # b (a constant), if the layer adds one
    relu: bool
    out_scale: float  # the dequantize's scale: s in `sum * s * ws + b`
    nodes: frozenset[str]  # every node of the pattern
    requant: Node | None = None  # the quantize of the output to u8, if any

    @property
    def input(self) -> str:
        return (self.quantize or self.product).inputs[0]

    @property
    def weight(self) -> str:
        return self.product.inputs[1]

    @property
    def shift(self) -> int:
        """What moves the quantized input to u8: 128 for an s8 one."""
        return 128 if self.quantize and self.quantize.attrs["dtype"] == "i8" else 0


def match(graph: Graph, nodes: list[str], users: dict, outputs) -> Int8Layer | None:
    """The int8 layer that `nodes` (in graph order, the root last) are exactly, or None.
    Every value but the root must be read only inside the pattern (`users`, `outputs`)."""
    if not nodes:
        return None
    root = graph[nodes[-1]]
    requant = root if root.op == "quantize" and root.attrs["dtype"] == "u8" else None
    chain = _epilogue_chain(graph, graph[root.inputs[0]] if requant else root)
    if chain is None:
        return None
    relu, bias, scale, deq = chain
    product = graph.nodes.get(deq.inputs[0])
    if product is None or product.op not in PRODUCTS:
        return None
    quantize = graph.nodes.get(product.inputs[0])
    if quantize is None or quantize.op != "quantize" or quantize.name not in nodes:
        quantize = None  # the input is the previous layer's u8 output
    inner = [n.name for n in (quantize, product, deq, scale, bias, relu, requant) if n]
    layer = Int8Layer(PRODUCTS[product.op], quantize, product, scale.inputs[1],
                      bias.inputs[1] if bias else None, relu is not None,
                      deq.attrs["scale"], frozenset(inner), requant)
    if set(nodes) != layer.nodes or not _private(inner[:-1], users, outputs, layer.nodes):
        return None
    return layer if _fits(graph, layer, root) else None


def _epilogue_chain(graph: Graph, root: Node):
    """(relu, add, mul, dequantize) nodes from the root down (relu and add may be None);
    the add and mul nodes are normalised so that inputs[1] is the constant operand."""
    relu = root if root.op == "relu" else None
    node = graph[root.inputs[0]] if relu else root
    bias = _with_const(graph, node) if node.op == "add" else None
    if node.op == "add" and bias is None:
        return None
    node = graph[bias.inputs[0]] if bias else node
    scale = _with_const(graph, node) if node.op == "mul" else None
    if scale is None:
        return None
    deq = graph[scale.inputs[0]]
    if deq.op != "dequantize" or deq.attrs.get("zero_point", 0) != 0:
        return None
    return relu, bias, scale, deq


def _with_const(graph: Graph, node: Node) -> Node | None:
    """A binary node with its constant operand second (a copy when swapped), or None."""
    a, b = node.inputs
    if graph[b].op == "const" and graph[a].op != "const":
        return node
    if graph[a].op == "const" and graph[b].op != "const":
        return replace(node, inputs=(b, a))
    return None


def _private(values: list[str], users: dict, outputs, nodes: frozenset[str]) -> bool:
    return all(v not in outputs and set(users.get(v, ())) <= nodes for v in values)


def _requant_fits(q: Node | None) -> bool:
    return q is None or (q.attrs["scale"] > 0 and 0 <= q.attrs["zero_point"] <= 255)


def _fits(graph: Graph, layer: Int8Layer, root: Node) -> bool:
    """Types, layouts and constant shapes the int8 kernels take."""
    q, p = layer.quantize, layer.product
    x, w, out = graph[layer.input].type, graph[p.inputs[1]].type, root.type
    if x.dtype is not (DType.f32 if q else DType.u8) or \
            out.dtype is not (DType.u8 if layer.requant else DType.f32) or \
            (q and q.attrs["dtype"] not in ("u8", "i8")) or graph[p.inputs[1]].op != "const" or \
            not _requant_fits(layer.requant) or \
            not 0 <= p.attrs["x_zero"] + layer.shift <= 255 or \
            not (is_identity_layout(x) and is_identity_layout(out)):
        return False
    if layer.template == "qconv":
        if p.attrs["groups"] != 1 or x.rank != 4 or w.rank != 4 or \
                w.shape[1] * w.shape[2] * w.shape[3] > MAX_K:
            return False
        channel = lambda t: t.rank >= 3 and t.shape[-3] == w.shape[0] and \
            all(d == 1 for i, d in enumerate(t.shape) if i != t.rank - 3)  # noqa: E731
    else:
        if w.shape[0] > MAX_K:
            return False
        channel = lambda t: t.rank >= 1 and t.shape[-1] == w.shape[1] and \
            all(d == 1 for d in t.shape[:-1])  # noqa: E731
    consts = [layer.scale] + ([layer.bias] if layer.bias else [])
    return all(graph[c].type.dtype is DType.f32 and channel(graph[c].type) and
               graph[c].type.rank <= out.rank for c in consts)
