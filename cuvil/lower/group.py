"""Partition an inlined graph into kernel groups, each lowered by one template.

Every non-leaf node starts in a group of its own kind (`elementwise`, `gemm`, `conv`,
`rows`, `pool`, `attention`, `concat`, `gather`, `alias` for free views, `fallback` for
what runs through torch). Then, in order:

1. each composite instance whose op names a kernel family (`op ... kernel gemm` in `.cvr`,
   `cuvil.dsl.kernels`) becomes one group of that family's template when its nodes fit
   the family's fact (a GEMM with an elementwise epilogue, 2-3 of them chained (`mlp`),
   an int8 layer as `qlayer` matches it, ...); an instance of one node is that node's
   group; otherwise its nodes stay apart and it is the composition of its parts' kernels;
2. the attention pattern `softmax(q @ k^T * s + mask) @ v` becomes one group where no
   instance holds it: the target's matcher (`Target.attention_matcher`) finds it in the
   graph, since attention reaches lowering written out by the model (a pattern the
   `fusion_attention` rules' guards refuse: rank 3, a dropout, another score chain) and
   no composite op stands for it (the rules rewrite to the catalog's
   `scaled_dot_product_attention`);
3. with `fuse_elementwise`, an elementwise node absorbs elementwise producers whose value
   it alone reads and whose shape and layout equal its own (a lowering decision the report
   lists). GEMM and convolution epilogues are not lowering's to make: they come from the
   fused ops of `.cvr` rules (step 1).

A group runs where its last node stood in the graph, which keeps the order topological.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from cuvil.dsl import kernels
from cuvil.ir.graph import Graph, Node
from cuvil.ir.types import DType, default_layout
from cuvil.lower import qlayer
from cuvil.lower.inline import Instance
from cuvil.lower.physical import is_identity_layout, kernel_dtype, layout_perm
from cuvil.ops import registry
from cuvil.ops.registry import SHAPE


def family(op: str) -> str:
    """The kernel family of a catalog op (`OpDef.lowering`); "composite" for a composite op
    kept whole (`inline.runs_in_torch`), which runs through torch."""
    return registry.get(op).lowering if registry.exists(op) else "composite"


def is_leaf(op: str) -> bool:
    return family(op) == "leaf"


def is_alias(op: str) -> bool:
    """A free view on this target: views, inference dropout, a move within one device."""
    return family(op) in ("alias", "transfer")


def is_move(op: str) -> bool:
    return family(op) == "move"


def layout_aware(op: str) -> bool:
    """Whether the op's kernel reads any physical layout; other ops get logical-order
    inputs. Elementwise and move kernels index each operand by its layout, convolution and
    pooling have NHWC variants, and aliases that are not reshapes pass any layout on."""
    opdef = registry.get(op)
    return opdef.lowering in ("elementwise", "move", "conv", "pool", "leaf") or \
        (is_alias(op) and opdef.kind != SHAPE)


# Lowering merges elementwise chains on its own; epilogues of GEMMs and convolutions come
# only from the fused ops that rules produce (`linear_relu`, `conv2d_bias_relu`, ...), so
# that turning a fusion family off really turns that fusion off.
EPILOGUE_HOSTS = ("elementwise",)


@dataclass
class Group:
    template: str
    nodes: list[str]
    instance: str | None = None  # the composite node this group lowers, if exactly one
    reason: str = ""  # fallbacks: why; fused groups: what was fused
    fused: list[str] = field(default_factory=list)  # primitive nodes merged by fusion

    @property
    def output(self) -> str:
        return self.nodes[-1]

    def node_list(self, ctx) -> list[Node]:
        return [ctx.graph[n] for n in self.nodes if ctx.graph[n].op != "scalar"]


def classify(node: Node, graph: Graph) -> tuple[str, str]:
    """(template kind, reason) of one primitive node; a node on one device other than the
    host is classified alike (its target's generators lower the same groups), a node
    across devices is left to `cuvil.lower.devices`."""
    types = [graph[i].type for i in node.inputs] + [node.type]
    for t in types:
        if not kernel_dtype(t.dtype, t.device):
            return "fallback", f"dtype {t.dtype} has no {t.device} kernel"
        if t.device != node.type.device:
            return "fallback", f"device {t.device} and {node.type.device} in one node"
    kind = family(node.op)
    if is_alias(node.op):
        return "alias", ""
    if node.op == "to_layout":
        same = layout_perm(graph[node.inputs[0]].type) == layout_perm(node.type)
        return ("alias" if same else "elementwise"), ""
    if kind == "move":
        return "elementwise", ""
    if node.op == "torch_op":
        return "fallback", f"torch_op {node.attrs.get('target')} is opaque"
    if kind in ("fallback", "composite"):
        return "fallback", f"no CPU kernel for {node.op}"
    return kind, ""


def normalize_layouts(graph: Graph) -> Graph:
    """Insert `to_layout` before ops that need logical order but get another layout."""
    g = graph.copy()
    g.report = graph.report
    g.nodes = {}
    for node in graph:
        if classify(node, graph)[0] == "fallback" or layout_aware(node.op):
            g._put(node)
            continue
        inputs = []
        for i in node.inputs:
            t = g[i].type
            if is_identity_layout(t):
                inputs.append(i)
                continue
            inputs.append(g.add("to_layout", [i], {"layout": default_layout(t.rank)},
                                name=g.fresh(f"{i}_logical"), source=node.source,
                                origin=node.origin))
        g._put(Node(node.name, node.op, tuple(inputs), node.attrs, node.type, node.source,
                    node.origin))
    return g


def private_view_chains(graph: Graph) -> Graph:
    """Give each move its own copy of the moves and views upstream of it, where those are
    shared only by other moves: views cost nothing, so `x.transpose(...)` feeding three
    `select`s becomes three composed views and three copies instead of four copies."""
    users = {k: list(dict.fromkeys(v)) for k, v in graph.users().items()}
    outputs = set(graph.outputs)

    def only_moves_below(v: str) -> bool:
        return v not in outputs and all(
            is_move(graph[u].op) or (is_alias(graph[u].op) and only_moves_below(u))
            for u in users[v])

    clones: dict[str, list[str]] = {}  # move -> its upstream chain, outermost first
    for node in graph:
        if not is_move(node.op):
            continue
        chain, v = [], node.inputs[0]
        while (is_move(graph[v].op) or is_alias(graph[v].op)) and only_moves_below(v):
            chain.append(v)
            v = graph[v].inputs[0]
        if any(len(users[c]) > 1 for c in chain):
            clones[node.name] = chain[::-1]
    if not clones:
        return graph
    g = graph.copy()
    g.report = graph.report
    g.nodes = {}
    for node in graph:
        if node.name in clones:
            prev = graph[clones[node.name][0]].inputs[0]
            for c in clones[node.name]:
                prev = g._put(replace(graph[c], name=g.fresh(f"{c}_"), inputs=(prev,)))
            node = replace(node, inputs=(prev,))
        g._put(node)
    return g.prune()


class Partition:
    """Groups of one graph, with the bookkeeping the merge steps need."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.order = {name: i for i, name in enumerate(graph.nodes)}
        self.users = {k: sorted(set(v), key=self.order.get) for k, v in graph.users().items()}
        self.outputs = set(graph.outputs)
        self.group_of: dict[str, Group] = {}
        for node in graph:
            if not is_leaf(node.op):
                kind, reason = classify(node, graph)
                self._assign(Group(kind, [node.name], reason=reason))

    def _assign(self, group: Group) -> Group:
        for n in group.nodes:
            self.group_of[n] = group
        return group

    def merge(self, parts: list[Group], template: str, instance: str | None = None) -> Group:
        names = sorted({n for p in parts for n in p.nodes}, key=self.order.get)
        fused = [n for p in parts for n in p.fused]
        return self._assign(Group(template, names, instance, fused=fused))

    def groups(self) -> list[Group]:
        unique = {id(g): g for g in self.group_of.values()}.values()
        return sorted(unique, key=lambda g: self.order[g.output])

    def private(self, value: str, consumers: set[str]) -> bool:
        """Whether only `consumers` read `value` and it is not a graph output."""
        return value not in self.outputs and set(self.users[value]) <= consumers


def partition(graph: Graph, instances: dict[str, Instance], fuse_elementwise: bool = True,
              attention_match=None) -> list[Group]:
    part = Partition(graph)
    for inst in instances.values():
        _group_instance(part, inst, attention_match)
    if attention_match is not None:
        for node in graph:
            if node.op == "softmax" and part.group_of[node.name].instance is None:
                members = attention_match(graph, part, node)
                if members:
                    part.merge([part.group_of[m] for m in members], "attention")
    _chain_moves(part)
    if fuse_elementwise:
        _fuse(part)
    return part.groups()


def _group_instance(part: Partition, inst: Instance, attention_match) -> None:
    """One group for the instance when it is one part, or when its nodes fit the kernel
    family its op declares; otherwise its nodes stay apart (lowered as its parts)."""
    graph = part.graph
    members = [m for m in inst.members if graph[m].op != "scalar"]
    if not members:
        return
    kinds = {m: part.group_of[m].template for m in members}
    if len(members) == 1:
        template = kinds[members[0]] if kinds[members[0]] != "fallback" else None
    else:
        kernel = kernels.family(inst.kernel)
        fits = kernel is not None and "fallback" not in kinds.values() and \
            _fits(part, members, kernel, kinds, attention_match)
        template = kernel.name if fits else None
    if template is not None:
        part.merge([part.group_of[m] for m in members], template, inst.node.name)


def _fits(part: Partition, members: list[str], kernel: kernels.KernelFamily,
          kinds: dict[str, str], attention_match) -> bool:
    """Whether an instance's nodes (graph order, the root last) are what `kernel` computes
    in one call, by its family's fact; the template checks the rest as it generates."""
    graph = part.graph
    if kernel.matcher == "int8":
        layer = qlayer.match(graph, members, part.users, part.outputs)
        return layer is not None and layer.template == kernel.name == \
            kinds[layer.product.name] and \
            all(kinds[m] == "elementwise" for m in members if m != layer.product.name)
    if kernel.matcher == "attention":
        softmax = [m for m in members if graph[m].op == "softmax"]
        found = attention_match(graph, part, graph[softmax[0]]) \
            if attention_match is not None and len(softmax) == 1 else None
        return bool(found) and set(found) == set(members)
    if graph[members[-1]].op in kernel.tail and graph[members[-1]].inputs[0] == members[-2]:
        members = members[:-1]  # a pool reading the epilogue ends the kernel
    members = members[len(widening_casts(graph, members)):]
    members = members[len(transposed_operands(graph, members)):]
    root = graph[members[-1]]
    products = [m for m in members if kinds[m] != "elementwise"]
    low, high = kernel.count
    if not low <= len(products) <= high or \
            any(graph[m].op not in kernel.products for m in products):
        return False
    if products and (products[0] != members[0] or
                     set(graph[products[0]].inputs) & set(members)):
        return False  # the first product opens the body, on the instance's inputs
    return not kernel.same_shape or all(
        graph[m].type.shape == root.type.shape and graph[m].type.layout == root.type.layout
        for m in members)


def widening_casts(graph: Graph, members: list[str]) -> list[str]:
    """The leading members that cast an operand of the instance from f16 to f32 (an f16
    layer's explicit f32 accumulation): the product's kernel reads that operand as f16 and
    widens each element as it loads it."""
    out = []
    for m in members:
        node = graph[m]
        if node.op != "cast" or node.type.dtype is not DType.f32 or node.inputs[0] in members \
                or graph[node.inputs[0]].type.dtype is not DType.f16:
            break
        out.append(m)
    return out


def transposed_operands(graph: Graph, members: list[str]) -> list[str]:
    """The leading members that transpose a matrix from outside the instance for its product
    alone (`matmul_lt`, `matmul_rt`): the product's kernel reads that matrix with its
    strides swapped (`templates.gemm`), nothing is copied."""
    out = []
    for m in members:
        node = graph[m]
        if not is_matrix_transpose(node, graph) or node.inputs[0] in members:
            break
        out.append(m)
    return out


def is_matrix_transpose(node: Node, graph: Graph) -> bool:
    """Whether `node` swaps the two dims of a matrix in the default layout."""
    if node.op != "transpose" or node.type.rank != 2:
        return False
    source = graph[node.inputs[0]].type
    dims = {node.attrs.get("dim0", 0) % 2, node.attrs.get("dim1", 1) % 2}
    return dims == {0, 1} and is_identity_layout(source) and is_identity_layout(node.type)


def is_move_chain(group: Group, graph: Graph) -> bool:
    """Whether a group only moves elements: moves and the views between them."""
    ops = [graph[n].op for n in group.nodes if graph[n].op != "scalar"]
    return bool(ops) and is_move(ops[-1]) and all(is_move(o) or is_alias(o) for o in ops)


def _chain_moves(part: Partition) -> None:
    """Moves joined through views (transpose -> view -> select -> transpose) become one
    group: one copy of the composed view instead of one copy per move."""
    graph = part.graph
    for node in graph:
        own = part.group_of.get(node.name)
        if not is_move(node.op) or own is None or own.template != "elementwise" or \
                len(own.nodes) != 1:
            continue
        views, v, consumer = [], node.inputs[0], node.name
        while is_alias(graph[v].op) and part.private(v, {consumer}):
            views.append(v)
            consumer, v = v, graph[v].inputs[0]
        producer = part.group_of.get(v)
        if producer is None or producer.output != v or not part.private(v, {consumer}) or \
                not is_move_chain(producer, graph):
            continue
        parts = [producer, *(part.group_of[a] for a in views), part.group_of[node.name]]
        part.merge(parts, "elementwise")


def _fuse(part: Partition) -> None:
    graph = part.graph
    for node in graph:
        group = part.group_of.get(node.name)
        if group is None or group.template not in EPILOGUE_HOSTS or \
                classify(node, graph)[0] != "elementwise":
            continue
        for p in dict.fromkeys(node.inputs):
            producer = part.group_of.get(p)
            group = part.group_of[node.name]
            if producer is None or producer is group or producer.output != p or \
                    producer.template not in EPILOGUE_HOSTS or any(
                        graph[n].type.shape != graph[p].type.shape for n in producer.nodes
                        if graph[n].op != "scalar" and producer.template == "elementwise"):
                continue  # an elementwise group's nodes must all have its output's shape
            if not part.private(p, {node.name}):
                continue
            if graph[p].type.shape != node.type.shape or \
                    graph[p].type.layout != node.type.layout:
                continue
            heavy = [g.template for g in (producer, group) if g.template != "elementwise"]
            if len(heavy) > 1:
                continue
            merged = part.merge([producer, group], heavy[0] if heavy else "elementwise",
                                group.instance or producer.instance)
            merged.fused = sorted({*producer.fused, *group.fused, *producer.nodes,
                                   *group.nodes}, key=part.order.get)
