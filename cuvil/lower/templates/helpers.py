"""Shared functions generated kernels may call, imported by the module when used.

They live in `cuvil.runtime.blas`, `.conv`, `.vmath` and `.int8`, compiled once per
installation; each import line quotes its file's hash so that kernels cached against an
older version are not reused.

A few runtime functions are called at compile time instead, to arrange a constant the way
a helper reads it (`PREPARERS`: the int8 kernels' packed weights). Lowering sits below the
runtime, so it names them by module, as generated text names helpers, and loads them only
when a template calls `preparer`.
"""

from __future__ import annotations

HELPERS = {"gemv": "cuvil.runtime.blas", "gemm": "cuvil.runtime.blas",
           "gemm_batched": "cuvil.runtime.blas",
           **{f"{kind}_{layout}": "cuvil.runtime.conv" for kind in
              ("conv2d", "conv1x1", "depthwise") for layout in ("nchw", "nhwc")},
           "conv2d_nchw_few": "cuvil.runtime.conv", "pad_plane": "cuvil.runtime.conv",
           **{name: "cuvil.runtime.vmath" for name in ("vexp", "vtanh", "verf", "vsigmoid")},
           **{name: "cuvil.runtime.int8" for name in ("qgemm_layer", "qconv_layer")}}

PREPARERS = {"pack_weight": "cuvil.runtime.quantized",
             "pack_conv_weight": "cuvil.runtime.quantized", "prepare": "cuvil.runtime.int8"}


def preparer(name: str):
    """The runtime function `name` of `PREPARERS`, for a template to call at compile time."""
    import importlib

    return getattr(importlib.import_module(PREPARERS[name]), name)


def used_helpers(body: str) -> list[str]:
    """The helpers that generated code `body` calls, in a fixed order."""
    import re

    return [name for name in HELPERS if re.search(rf"\b{name}\(", body)]


def helper_text(names: list[str]) -> list[str]:
    """Import lines that make the helpers `names` available to the module's kernels."""
    import importlib

    lines = []
    for module in dict.fromkeys(HELPERS[n] for n in names):
        wanted = ", ".join(n for n in names if HELPERS[n] == module)
        digest = importlib.import_module(module).source_hash()
        lines.append(f"from {module} import {wanted}  # {module} {digest}")
    return lines
