"""The CPU target's table of shared functions its generated kernels may call, each
imported by the module when used.

They live in the target's `kernels/` (`blas`, `conv`, `vmath`, `int8`, ...), compiled once
per installation; each import line quotes the drivers' source hash (`cuvil.paths.
drivers_hash`, read from the files) so that kernels cached against an older version are not
reused. Constants in a format only the kernels know are declared, not computed, here
(`LowerContext.derive`; the target's `recipes.py` computes them).
"""

from __future__ import annotations

KERNELS = "cuvil.targets.cpu.kernels"
HELPERS = {"gemm": f"{KERNELS}.blas", "gemm_weight": f"{KERNELS}.blas",
           "mlp_post": f"{KERNELS}.mlp", "mlp_head_post": f"{KERNELS}.mlp",
           "gemm_batched": f"{KERNELS}.blas",
           **{f"{kind}_{layout}": f"{KERNELS}.conv" for kind in
              ("conv2d", "conv1x1", "depthwise") for layout in ("nchw", "nhwc")},
           **{name: f"{KERNELS}.conv" for name in (
               "conv2d_nchw_few", "pad_plane", "conv1x1_nchw_image", "conv2d_nchw_image",
               "conv2d_nchw_few_image")},
           **{name: f"{KERNELS}.conv_direct" for name in (
               "conv2d_nchw_direct", "conv2d_nchw_direct_image")},
           **{name: f"{KERNELS}.winograd" for name in (
               "conv2d_nchw_winograd", "conv2d_nchw_winograd_image", "winograd_weight_of")},
           **{name: f"{KERNELS}.conv_post" for name in (
               "conv2d_nchw_direct_post", "conv2d_nchw_direct_pool_post", "conv2d_nchw_post",
               "conv2d_nchw_winograd_post", "conv2d_nchw_winograd_pool_post",
               "conv2d_nchw_few_post", "conv1x1_nchw_post")},
           **{f"{name}_raw": f"{KERNELS}.conv_raw" for name in (
               "conv2d_nchw_direct_post", "conv2d_nchw_winograd_post", "conv2d_nchw_few_post")},
           **{f"conv2d_{layout}_grouped": f"{KERNELS}.conv_grouped"
              for layout in ("nchw", "nhwc")},
           "linear_post": f"{KERNELS}.gemm_post",
           "depthwise_nchw_post": f"{KERNELS}.depthwise",
           "attention_post": f"{KERNELS}.attention",
           "pool_inside_nchw": f"{KERNELS}.pool", "global_average_nchw": f"{KERNELS}.pool",
           "layer_norm_rows": f"{KERNELS}.rows", "copy_into": f"{KERNELS}.copies",
           "binary_mapped": f"{KERNELS}.mapped",
           "lstm_layer_run": f"{KERNELS}.recurrent", "gru_layer_run": f"{KERNELS}.recurrent",
           **{name: f"{KERNELS}.vmath"
              for name in ("vexp", "vtanh", "verf", "vsigmoid", "vmax", "vamax", "vmaximum",
                           "vminimum", "vrsqrt", "vmasked")},
           **{name: f"{KERNELS}.int8" for name in ("qgemm_layer", "qgemm_layer_q", "qconv_layer",
                                                      "qconv_layer_q")}}


def used_helpers(body: str) -> list[str]:
    """The helpers that generated code `body` calls, in a fixed order."""
    import re

    return [name for name in HELPERS if re.search(rf"\b{name}(\(|  #)", body)]


def helper_text(names: list[str]) -> list[str]:
    """Import lines that make the helpers `names` available to the module's kernels."""
    from cuvil.paths import drivers_hash

    digest, lines = drivers_hash(), []
    for module in dict.fromkeys(HELPERS[n] for n in names):
        wanted = ", ".join(n for n in names if HELPERS[n] == module)
        lines.append(f"from {module} import {wanted}  # {module} {digest}")
    return lines
