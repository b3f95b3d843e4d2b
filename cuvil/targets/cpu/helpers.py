"""The CPU target's table of shared functions its generated kernels may call, each
imported by the module when used.

They live in `cuvil.runtime.blas`, `.conv`, `.vmath` and `.int8`, compiled once per
installation; each import line quotes the runtime's source hash (`cuvil.paths.package_hash`,
read from the files: lowering sits below the runtime and never imports it) so that kernels
cached against an older version are not reused. Constants in a format only the runtime
knows are declared, not computed, here (`LowerContext.derive`).
"""

from __future__ import annotations

HELPERS = {"gemm": "cuvil.runtime.blas", "gemm_weight": "cuvil.runtime.blas",
           "mlp_post": "cuvil.runtime.mlp", "mlp_head_post": "cuvil.runtime.mlp",
           "gemm_batched": "cuvil.runtime.blas",
           **{f"{kind}_{layout}": "cuvil.runtime.conv" for kind in
              ("conv2d", "conv1x1", "depthwise") for layout in ("nchw", "nhwc")},
           **{name: "cuvil.runtime.conv" for name in (
               "conv2d_nchw_few", "pad_plane", "conv1x1_nchw_image", "conv2d_nchw_image",
               "conv2d_nchw_few_image")},
           **{name: "cuvil.runtime.conv_direct" for name in (
               "conv2d_nchw_direct", "conv2d_nchw_direct_image")},
           **{name: "cuvil.runtime.winograd" for name in (
               "conv2d_nchw_winograd", "conv2d_nchw_winograd_image")},
           **{name: "cuvil.runtime.conv_post" for name in (
               "conv2d_nchw_direct_post", "conv2d_nchw_direct_pool_post", "conv2d_nchw_post",
               "conv2d_nchw_winograd_post", "conv2d_nchw_winograd_pool_post",
               "conv2d_nchw_few_post", "conv1x1_nchw_post")},
           "linear_post": "cuvil.runtime.gemm_post",
           "depthwise_nchw_post": "cuvil.runtime.depthwise",
           "attention_post": "cuvil.runtime.attention",
           "pool_inside_nchw": "cuvil.runtime.pool", "global_average_nchw": "cuvil.runtime.pool",
           "layer_norm_rows": "cuvil.runtime.rows",
           "binary_mapped": "cuvil.runtime.mapped",
           "lstm_layer_run": "cuvil.runtime.recurrent", "gru_layer_run": "cuvil.runtime.recurrent",
           **{name: "cuvil.runtime.vmath"
              for name in ("vexp", "vtanh", "verf", "vsigmoid", "vmax", "vamax", "vmaximum",
                           "vminimum", "vrsqrt", "vmasked")},
           **{name: "cuvil.runtime.int8" for name in ("qgemm_layer", "qgemm_layer_q", "qconv_layer",
                                                      "qconv_layer_q")}}


def used_helpers(body: str) -> list[str]:
    """The helpers that generated code `body` calls, in a fixed order."""
    import re

    return [name for name in HELPERS if re.search(rf"\b{name}(\(|  #)", body)]


def helper_text(names: list[str]) -> list[str]:
    """Import lines that make the helpers `names` available to the module's kernels."""
    from cuvil.paths import package_hash

    lines = []
    for module in dict.fromkeys(HELPERS[n] for n in names):
        wanted = ", ".join(n for n in names if HELPERS[n] == module)
        digest = package_hash(module.split(".")[1])
        lines.append(f"from {module} import {wanted}  # {module} {digest}")
    return lines
