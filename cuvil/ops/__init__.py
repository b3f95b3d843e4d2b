"""The op catalog: each primitive op's signature, type inference and torch reference.

`get(name)` returns an op's `OpDef`; `all_ops()` lists the catalog. Composite ops from
`.cvr` files are `OpDef`s too, passed around in a `defs` table rather than registered here.

Names load on first use: the pipeline imports this package at the top, and a warm compile
(a program-cache hit) never loads the catalog.
"""

__all__ = ["CATALOG", "REQUIRED", "AttrSpec", "OpDef", "all_ops", "bind_symbols", "exists",
           "flops", "get", "infer"]


def __getattr__(name: str):
    if name == "bind_symbols":
        from cuvil.ops.execute import bind_symbols

        return bind_symbols
    if name not in __all__:
        raise AttributeError(f"module 'cuvil.ops' has no attribute {name!r}")
    from cuvil.ops import registry

    return getattr(registry, name)
