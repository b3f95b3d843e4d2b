"""The op catalog: each primitive op's signature, type inference and torch reference.

`get(name)` returns an op's `OpDef`; `all_ops()` lists the catalog. Composite ops from
`.cvr` files are `OpDef`s too, passed around in a `defs` table rather than registered here.
"""

from cuvil.ops.registry import (
    CATALOG,
    REQUIRED,
    AttrSpec,
    OpDef,
    all_ops,
    exists,
    flops,
    get,
    infer,
)

__all__ = ["CATALOG", "REQUIRED", "AttrSpec", "OpDef", "all_ops", "exists", "flops", "get",
           "infer"]
