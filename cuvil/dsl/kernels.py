"""The kernel families a composite op may name (`op NAME(...) = BODY kernel FAMILY` in `.cvr`,
`OpDef.kernel`), each with what its kernel computes in one call.

A fused op is defined by the ops it replaces; its `kernel` clause says which template
computes the whole body at once. Each family here is a declarative fact about its
templates (`cuvil/targets/<target>/templates/<family>.py`; a target without the family
lowers such an instance as its parts): which ops are its products, how many a body holds,
whether the ops around them must be an elementwise epilogue of the result's shape, what
may end the body after the epilogue (a pool), and which structural matcher of lowering
decides the rest. The checker (`cuvil.library.checker`) holds a body against its family
(`body_misfit`), lowering holds each inlined instance against it (`cuvil.lower.group`),
and the template keeps its own fit check: a group it rejects is split into its parts.

A composite with no `kernel` clause is lowered as its parts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelFamily:
    """What the kernel of one family accepts as one group."""

    name: str  # the family, and the name of its templates
    products: tuple[str, ...]  # the ops the kernel is built around (none: elementwise)
    count: tuple[int, int]  # how many products a body holds, at least and at most
    around: tuple[str, ...] = ("elementwise", "move")  # families of the other ops
    same_shape: bool = True  # every op has the result's shape and layout (an epilogue)
    tail: tuple[str, ...] = ()  # ops that may end the body, reading its epilogue
    matcher: str = ""  # lowering's structural matcher of the whole instance, if any
    doc: str = ""


FAMILIES = {f.name: f for f in (
    KernelFamily("elementwise", (), (0, 0),
                 doc="an elementwise DAG of one shape, one loop"),
    KernelFamily("gemm", ("matmul",), (1, 1),
                 doc="one product with an elementwise epilogue of the product's shape"),
    KernelFamily("conv", ("conv2d",), (1, 1), tail=("max_pool2d",),
                 doc="one convolution with an elementwise epilogue, then a max pool or not"),
    KernelFamily("mlp", ("matmul",), (2, 3), same_shape=False,
                 doc="2-3 chained products, each with an elementwise epilogue"),
    KernelFamily("qgemm", ("matmul_i8",), (1, 1), same_shape=False, matcher="int8",
                 doc="an int8 layer: quantize, u8 x s8 product, dequantizing epilogue"),
    KernelFamily("qconv", ("conv2d_i8",), (1, 1), same_shape=False, matcher="int8",
                 doc="an int8 convolution layer, as qgemm"),
    KernelFamily("attention", ("matmul", "bmm"), (2, 2), same_shape=False,
                 around=("elementwise", "move", "alias", "rows"), matcher="attention",
                 doc="softmax(q @ k^T * s + mask) @ v per (batch, head) slice"),
)}


def family(name: str) -> KernelFamily | None:
    """The kernel family called `name`, or None."""
    return FAMILIES.get(name)


def body_misfit(kernel: KernelFamily, ops: list[tuple[str, str]]) -> str:
    """Why a body whose calls are `ops` ((op, its `OpDef.lowering`), composites expanded)
    is not what `kernel` computes; "" when it fits."""
    products = [op for op, _ in ops if op in kernel.products]
    low, high = kernel.count
    if kernel.products and not low <= len(products) <= high:
        want = f"{low}" if low == high else f"{low} to {high}"
        return f"kernel {kernel.name} takes {want} {' or '.join(kernel.products)} call(s), " \
               f"the body has {len(products)}"
    for i, (op, lowering) in enumerate(ops):
        last = i == len(ops) - 1
        if op not in kernel.products and not (last and op in kernel.tail) and \
                lowering not in kernel.around:
            return f"kernel {kernel.name} ({kernel.doc}) has no place for {op}"
    return ""
