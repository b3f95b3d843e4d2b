"""The head split and merge of multi-head attention, read and written in place.

    q = linear(x).view(B, L, H, D).transpose(1, 2)    # the split: a copy kernel of its own
    k, v likewise, or slices of one fused projection: qkv[:, :, C:2C].view(...).transpose(1, 2)
    y = attention(q, k, v).transpose(1, 2).reshape(B, L, C)    # the merge: another copy

The runtime's `attention_post` reads q, k (in rows) and v with their heads inside ([B, L,
G, D], the heads of one operand being H of the G that start at its column) and writes its
output as [B, L, H, D]. So after partition, an attention group it computes takes in the
copies around it that only it reads (`heads_in_place`): a head transpose alone, or a
slice -> view -> transpose chain (`group._chain_moves` made it one copy), and the merge
transpose after it. The ViT block lost four copies (~120 of ~1400 us), GPT-2's block
four too (its three input copies alone ~480 of ~9100 us).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cuvil.ir.graph import Graph, Node
from cuvil.ir.types import is_static


@dataclass(frozen=True)
class Split:
    """Where attention reads an operand: `root` (rank 4, its heads inside when the operand
    is a split; else the operand itself, [B, H, L, D]) or a rank-3 [B, L, W] value whose
    heads (each `d` wide) start at column `start`."""

    root: str
    start: int
    d: int | None = None


class Splits(dict):
    """The head splits a group holds: logical operand -> `Split`; `members`: their nodes."""

    def __init__(self):
        super().__init__()
        self.members: set[str] = set()


def is_head(node: Node) -> bool:
    """Whether `node` moves heads and positions past each other: `transpose(x, 1, 2)` of a
    rank-4 value."""
    return node.op == "transpose" and node.type.rank == 4 and \
        {node.attrs["dim0"] % 4, node.attrs["dim1"] % 4} == {1, 2}


def heads_of(nodes: list[Node], graph: Graph) -> tuple[Splits, bool]:
    """(the head splits among an attention group's `nodes`, whether its last node is the
    head merge)."""
    names = {n.name for n in nodes}
    splits = Splits()
    for n in nodes:
        found = _split_of(n, graph, names) if is_head(n) else None
        if found is not None:
            splits[n.name], members = found
            splits.members.update(members)
    last = nodes[-1]
    return splits, is_head(last) and last.inputs[0] in names and last.name not in splits


def _split_of(t: Node, graph: Graph, names: set[str]) -> tuple[Split, list[str]] | None:
    """(where head transpose `t` reads from, its nodes in the group) when its input comes
    from outside the group as it is, or through a view of a last-dim slice of a [B, L, W]
    value; else None."""
    x = graph[t.inputs[0]]
    if x.name not in names:
        return Split(x.name, 0), [t.name]
    if x.op not in ("view", "reshape") or x.inputs[0] not in names or \
            graph[x.inputs[0]].op != "slice":
        return None
    cut, (b, n, h, d) = graph[x.inputs[0]], x.type.shape
    whole = [cut.inputs[0]]  # `h[:, :, a:b]` also slices dims 0 and 1 whole
    while whole[-1] in names and _whole(graph[whole[-1]]):
        whole.append(graph[whole[-1]].inputs[0])
    source = whole.pop()
    root, a = graph[source].type, cut.attrs
    if source in names or root.rank != 3 or a["dim"] % 3 != 2 or a["step"] != 1 or \
            root.shape[:2] != (b, n) or cut.type.shape != (b, n, h * d) or \
            not all(is_static(v) for v in (root.shape[2], d, a["start"])) or \
            a["start"] < 0 or root.shape[2] % d:
        return None
    return Split(source, int(a["start"]), int(d)), [*whole, cut.name, x.name, t.name]


def _whole(node: Node) -> bool:
    """Whether `node` is a slice that keeps all of its dim (`x[:, :, a:b]` slices dims 0
    and 1 so)."""
    a = node.attrs
    return node.op == "slice" and a["start"] == 0 and a["step"] == 1 and a["end"] is None


def stored_view(ctx, split: Split) -> str:
    """The value `attention_post` gets for an operand: its root, or a rank-3 root seen as
    [B, L, W / D, D] (a free reshape in the generated module)."""
    t = ctx.type(split.root)
    if t.rank == 4:
        return split.root
    b, n, w = t.shape
    return ctx.view(split.root, (b, n, w // split.d, split.d))


def heads_in_place(groups: list, graph: Graph, ours) -> list:
    """`groups` with each attention group on `attention_post` (that `ours(group)` says this
    target lowers) holding the head splits of its q, k (in rows) and v and the merge of its
    output, where those are copies of their own that only it reads."""
    from cuvil.targets.cpu.templates.attention import library_operands

    users = {k: set(v) for k, v in graph.users().items()}
    outputs, by_output = set(graph.outputs), {g.output: g for g in groups}
    order = {n: i for i, n in enumerate(graph.nodes)}
    merged: dict[int, object] = {}
    for group in groups:
        nodes = _nodes(group, graph)
        found = library_operands(nodes, graph) if group.template == "attention" and \
            ours(group) else None
        if found is None:
            continue
        out, sources, k_rows = found[:3]
        ins = [x.root for i, x in enumerate(sources) if (i != 1 or k_rows) and
               x.root not in outputs and users.get(x.root, set()) <= set(group.nodes)]
        after = users.get(out, set()) if out not in outputs else set()
        heads = {x for x in ins + (list(after) if len(after) == 1 else [])
                 if x in by_output and _copies_heads(by_output[x], graph)}
        take = [by_output[x] for x in sorted(heads, key=order.get)]
        names = sorted({n for g in (group, *take) for n in g.nodes}, key=order.get)
        if take and library_operands(_nodes(replace(group, nodes=names), graph),
                                     graph) is not None:
            merged[id(group)] = replace(group, nodes=names)
            merged.update({id(g): None for g in take})
    kept = [merged.get(id(g), g) for g in groups]
    return [g for g in kept if g is not None]


def _nodes(group, graph: Graph) -> list[Node]:
    return [graph[n] for n in group.nodes if graph[n].op != "scalar"]


def _copies_heads(group, graph: Graph) -> bool:
    """Whether a group only copies a head split or merge: a head transpose, alone or after
    a view of a slice."""
    nodes = _nodes(group, graph)
    if not nodes or not is_head(nodes[-1]):
        return False
    return len(nodes) == 1 or _split_of(nodes[-1], graph, {n.name for n in nodes}) is not None
