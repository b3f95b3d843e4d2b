"""The CUDA target: numba.cuda kernels generated from the same op definitions as the CPU's.

`target.CudaTarget` registers as `cuda` (`cuvil.lower.target`); its generators
(`elementwise`, `gemm`, `rows`, `conv`, `pool`, `attention`) write `@cuda_kernel`
functions that the runtime's launcher (`cuvil.runtime.cuda`) compiles and launches over
the output; `transfer` lowers the `to_device` conversions at device boundaries as copies.
"""
