"""The CUDA target's templates: numba.cuda kernels from the same op definitions as the CPU's.

Each module's `generate` (`elementwise` (with `copy` for move chains), `gemm`, `mlp`,
`rows`, `conv` (with `conv_gemm`, its implicit GEMM), `pool`, `attention`, `recurrent`,
`movement` for `cat`, `embedding` and `arange`, `indexing` for scans and advanced
indexing) writes `@cuda_kernel` functions
that the target's runtime (`cuvil.targets.cuda.runtime`) compiles and launches over the
output; `transfer` lowers the `to_device` conversions at device boundaries as copies.
`cuvil.targets.cuda.target` lists them by family; `tiling` chooses the GEMM's and the
implicit GEMM's tiles.
"""
