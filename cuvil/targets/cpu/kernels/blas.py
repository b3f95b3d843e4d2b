"""Matrix products shared by every generated module.

A product by a constant weight (`gemm_weight`) takes what lowering prepared of it. An f32
weight is packed into column panels, and products of up to PANEL_MAX_ROWS rows run on
Cuvil's register tile over them (`gemm_packed`, `kernels.sgemm`). Each thread keeps its own
panels in its L2 from call to call; OpenBLAS packs its operand again on every call. Larger
products go to BLAS on the weight. An f64 weight is kept transposed for `kernels.gemv`.
Other products (`gemm`) take the tile on `b` itself on the CPUs where that was measured faster
than OpenBLAS (`TILE_CPUS`: a Zen 4 core, 5-25% on the zoo's products), BLAS elsewhere and
for f64. An operand of `gemm` may also be F-contiguous, the `.T` of a C-contiguous matrix
(`matmul_lt`, `matmul_rt`: a weight [N, K] as AOTAutograd passes it, a gradient in a
weight's gradient): BLAS reads it in place with the transposed flag, no copy (the tile
takes C-contiguous operands only). On a 2.0 GHz Intel Xeon that LLVM calls `rocketlake`,
the tile on `b` itself took 1.1-1.5x OpenBLAS's time on every zoo product, two threads
(1024x256 @ 256x768: 107 against 156 GFLOP/s); on packed panels it beats OpenBLAS up to
~256 rows. The choice of tile is made when a product is typed; Numba's cache keys on the
CPU's name too.

One pool: the BLAS runs one thread per call (scipy's OpenBLAS set so by
`blas_threads.single_threaded_blas`, MKL per call, `mkl`), and products are split between
Numba's threads instead: row blocks, or column blocks when there are fewer than
COLUMN_SPLIT_ROWS rows, or more columns than rows and a `b` of COLUMN_SPLIT_B elements or
more, one BLAS call each with leading dimensions and transpose flags (`_block`). With row
blocks each thread packs all of `b`, with column blocks all of `a`: for 64x784 @ 784x512 on
two threads rows took 648 us, columns 426; for a weight's gradient (256x2048 @ 2048x1024)
5920 against 3880 (torch's 3867), 256x4096 @ 4096x1024 13896 against 8251. With a smaller
`b` the rows were as fast or faster (512x256 @ 256x1024 948 against 972), and the zoo's
GPT-2 took 3.47 ms with rows against 3.69 with columns. `gemm_batched` splits batch
entries. Where torch ships MKL and the CPU is Intel's (`mkl.library`), blocks
of at least `mkl.MIN_WORK` multiply-adds call MKL, smaller ones OpenBLAS, and `x @ w^T`
takes BLAS rather than the tile (MKL 211 us against the tile's 266 for 32x784 @ (512x784)^T, one
thread).

These functions are compiled once per cache directory (`numba_cache.njit`) rather
than in every generated module: a parallel function costs ~1.5 s to compile, and this is
the only parallel code a small MLP needs. Generated modules quote the runtime's source
hash (`numba_cache.runtime_hash`), so a change here gives them new cache entries.
"""

from __future__ import annotations

import numpy as np
from numba import prange, types
from numba.extending import overload

from cuvil.runtime.numba_cache import njit
from cuvil.targets.cpu.kernels import mkl
from cuvil.targets.cpu.kernels.f32_tile import no_epilogue
from cuvil.targets.cpu.kernels.gemv import GEMV_PAR_WORK, gemv
from cuvil.targets.cpu.kernels.mkl import mkl_block
from cuvil.targets.cpu.kernels.sgemm import WIDTH, sgemm, sgemm_panels, sgemm_transposed

GEMM_PAR_WORK = 1 << 20  # multiply-adds below which one BLAS call on one thread is faster
COLUMN_SPLIT_ROWS = 128  # BLAS products with fewer rows split columns between threads,
COLUMN_SPLIT_B = 1 << 21  # and so do those with more columns than rows and a b this large
PANEL_MAX_ROWS = 256  # products by a packed weight with at most this many rows: the tile
# x @ w^T with this many rows of x (f32) takes the tile on w in place (`sgemm_transposed`).
# CPU time on one thread of a 2-core Xeon (AVX-512; scipy's OpenBLAS), x @ (512x784)^T:
# 32 rows 266 us against BLAS's 409 (torch's 235), 8 rows 170 against 247, 64 rows 543
# against 564, 128 rows 1086 against 910; 1 row 175 against 17 (the panel of 32 columns is
# padded); 32x512 @ (10x512)^T 13 against 4.
TRANSPOSED_TILE_ROWS = (8, 64)
TRANSPOSED_TILE_COLUMNS = 64
TILE_CPUS = ("znver4", "znver5")  # LLVM's names of the CPUs the f32 tile is faster on


def tile_is_faster() -> bool:
    """Whether f32 products take the register tile on this CPU (LLVM's name for it)."""
    from llvmlite import binding

    return binding.get_host_cpu_name() in TILE_CPUS


def _tile_cpu():
    """Whether this CPU is one of TILE_CPUS, as a constant in compiled code."""


@overload(_tile_cpu)
def _tile_cpu_for():
    faster = tile_is_faster()
    return lambda: faster


def _mkl():
    """Whether products call MKL (`mkl.library`), as a constant in compiled code."""


@overload(_mkl)
def _mkl_for():
    uses = mkl.library() == "mkl"
    return lambda: uses


def _product(a, b, c, parts):
    """c = a @ b on `parts` threads: the f32 tile, or BLAS (typed in `_product_for`)."""


@overload(_product)
def _product_for(a, b, c, parts):
    arrays = (a, b, c)
    contiguous = all(x.layout == "C" for x in arrays)
    if tile_is_faster() and contiguous and all(x.dtype == types.float32 for x in arrays):
        return lambda a, b, c, parts: sgemm(a, b, c, parts)
    if _strided(a, b, c) and b.layout == "F" and all(x.dtype == types.float32 for x in arrays):
        return _by_transposed_weight
    if _strided(a, b, c):
        return lambda a, b, c, parts: _blas_split(a, b, c, parts)
    return lambda a, b, c, parts: _blas(a, b, c, parts)


def _by_transposed_weight(a, b, c, parts):
    """c = a @ b, b the transpose of a C-contiguous w [N, K] (x @ w^T): the tile on w read
    in place against a's rows packed (`sgemm.sgemm_transposed`) for TRANSPOSED_TILE_ROWS
    rows and at least TRANSPOSED_TILE_COLUMNS columns where products do not call MKL,
    else BLAS."""
    low, high = TRANSPOSED_TILE_ROWS
    if not _mkl() and low <= a.shape[0] <= high and b.shape[1] >= TRANSPOSED_TILE_COLUMNS \
            and a.shape[1]:
        sgemm_transposed(a, b, c, parts)
    else:
        _blas_split(a, b, c, parts)


def _strided(a, b, c) -> bool:
    """Whether BLAS reads a and b as they are: C-contiguous, or F-contiguous (the transpose
    `.T` of a C-contiguous matrix, read with its strides swapped), into a C-contiguous c."""
    return c.layout == "C" and all(x.layout in "CF" and x.ndim == 2 for x in (a, b)) and \
        all(x.dtype == a.dtype and x.dtype in _XXGEMM for x in (b, c))


def _xxgemm(dtype):
    """Numba's own binding of BLAS `?gemm` (`numba_xxgemm`, the one its `np.dot` calls),
    with leading dimensions, so that a block of rows or columns is one call without a
    copy."""
    p = types.CPointer(dtype)
    return types.ExternalFunction("numba_xxgemm", types.intc(
        types.char, types.char, types.char, types.intp, types.intp, types.intp,
        p, p, types.intp, p, types.intp, p, p, types.intp))


_XXGEMM = {types.float32: _xxgemm(types.float32), types.float64: _xxgemm(types.float64)}


def _block(a, b, c, r0, r1, n0, n1):
    """c[r0:r1, n0:n1] = a[r0:r1] @ b[:, n0:n1] for C- or F-contiguous a and b and a
    C-contiguous c: through MKL where products call it (`mkl.library`) and the block is
    big enough, else OpenBLAS (typed below)."""


@overload(_block)
def _block_for(a, b, c, r0, r1, n0, n1):
    if mkl.library() != "mkl":
        return lambda a, b, c, r0, r1, n0, n1: _openblas_block(a, b, c, r0, r1, n0, n1)

    def either(a, b, c, r0, r1, n0, n1):
        if (r1 - r0) * a.shape[1] * (n1 - n0) >= mkl.MIN_WORK:
            mkl_block(a, b, c, r0, r1, n0, n1)
        else:
            _openblas_block(a, b, c, r0, r1, n0, n1)
    return either


def _openblas_block(a, b, c, r0, r1, n0, n1):
    """`_block` through scipy's OpenBLAS (typed below)."""


@overload(_openblas_block)
def _openblas_block_for(a, b, c, r0, r1, n0, n1):
    xxgemm, kind = _XXGEMM[a.dtype], ord("s" if a.dtype == types.float32 else "d")
    # BLAS is column-major: c.T[n0:n1, r0:r1] = b.T[n0:n1] @ a.T[:, r0:r1]. A C-contiguous
    # b is b.T there as it is; an F-contiguous b (bt.T) is read transposed, its rows K
    # apart; likewise a, its rows 1 apart and its columns M apart.
    trans_b, trans_a = (ord("n" if x.layout == "C" else "t") for x in (b, a))
    b_rows, a_rows = b.layout == "C", a.layout == "C"

    def block(a, b, c, r0, r1, n0, n1):
        one, zero = np.ones(1, a.dtype), np.zeros(1, a.dtype)
        m, k = a.shape
        n = b.shape[1]
        ldb = n if b_rows else max(k, 1)
        lda = max(k, 1) if a_rows else max(m, 1)
        xxgemm(kind, trans_b, trans_a, n1 - n0, r1 - r0, k, one.ctypes, b[:, n0:].ctypes,
               ldb, a[r0:].ctypes, lda, zero.ctypes, c[r0:, n0:].ctypes, max(n, 1))
    return block


@njit(nogil=True, parallel=True, link=False)
def _blas_columns(a, b, c, parts):
    n = b.shape[1]
    step = ((n + parts - 1) // parts + 15) // 16 * 16  # whole 64-byte lines of f32
    for t in prange(parts):
        n0 = min(n, t * step)
        n1 = min(n, n0 + step)
        if n1 > n0:
            _block(a, b, c, 0, a.shape[0], n0, n1)


@njit(nogil=True, parallel=True, link=False)
def _blas_rows(a, b, c, parts):
    m = a.shape[0]
    step = (m + parts - 1) // parts
    for t in prange(parts):
        r0 = min(m, t * step)
        r1 = min(m, r0 + step)
        if r1 > r0:
            _block(a, b, c, r0, r1, 0, b.shape[1])


@njit(nogil=True, parallel=True, link=False)
def _blas_parallel(a, b, c, parts):
    m = a.shape[0]
    step = (m + parts - 1) // parts
    for t in prange(parts):
        r0 = min(m, t * step)
        r1 = min(m, r0 + step)
        if r1 > r0:
            np.dot(a[r0:r1], b, c[r0:r1])


@njit(nogil=True)
def _blas(a, b, c, parts):
    if parts > 1 and a.shape[0] >= 2 * parts:
        _blas_parallel(a, b, c, parts)
    else:
        np.dot(a, b, c)


@njit(nogil=True)
def _blas_split(a, b, c, parts):
    """Rows split between threads, or columns when there are few rows and K > 0; one BLAS
    call per block, reading a and b as they lie (`_block`)."""
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    if m == 0 or n == 0:
        return
    if k == 0:
        c[:] = 0
    elif parts > 1 and (m < COLUMN_SPLIT_ROWS or n > m and k * n >= COLUMN_SPLIT_B) and \
            n >= 32 * parts:
        _blas_columns(a, b, c, parts)
    elif parts > 1 and m >= 2 * parts:
        _blas_rows(a, b, c, parts)
    else:
        _block(a, b, c, 0, m, 0, n)


@njit(nogil=True)
def gemm(a, b, c, parts):
    """c = a @ b (2-d, C-contiguous), split between `parts` threads when it is big enough."""
    big = a.shape[0] * a.shape[1] * b.shape[1] >= GEMM_PAR_WORK
    _product(a, b, c, parts if big else 1)


@njit(nogil=True, link=False)
def gemm_packed(a, panels, w, c, parts, epi):
    """c = a @ w for a constant f32 weight w [K, N], also packed at compile time as `panels`
    (`sgemm.sgemm_panels`): the tile on panels up to PANEL_MAX_ROWS rows (threads split the
    panels, each keeping its own in its L2 from call to call) and on TILE_CPUS, with the
    epilogue `epi` in its stores (returns True), else BLAS, without it (False)."""
    m, n = c.shape
    p = parts if m * a.shape[1] * n >= GEMV_PAR_WORK else 1
    if m <= PANEL_MAX_ROWS or _tile_cpu():
        sgemm_panels(a, panels, c, p, PANEL_MAX_ROWS + 1, epi)
        return True
    _blas_split(a, w, c, p)
    return False


@njit(nogil=True)
def gemm_weight(a, w, packed, c, parts, gemv_rows):
    """c = a @ w, `packed` being what lowering prepared of a constant weight: its panels
    [ceil(N / 32), K, 32] (f32: `gemm_packed`), its one panel and its rows, flat (f32
    narrower than a panel: `_narrow`), or `w` transposed (`gemv` for at most `gemv_rows`
    rows), or empty (not a constant: `gemm`)."""
    _by_weight(a, w, packed, c, parts, gemv_rows, no_epilogue())


@njit(nogil=True)
def gemm_weight_post(a, w, packed, c, parts, gemv_rows, epi):
    """`gemm_weight`, applying the epilogue epi = (bias [N], residual [M*N], lo, hi, flags:
    `f32_tile.post_tile_kernel`) in the tile's stores where the tile computes the product;
    returns whether it did (if not, c holds the bare product)."""
    return _by_weight(a, w, packed, c, parts, gemv_rows, epi)


def _by_weight(a, w, packed, c, parts, gemv_rows, epi):
    """`gemm_weight_post`'s product, chosen by the type of `packed` (in `_by_weight_for`)."""


@overload(_by_weight)
def _by_weight_for(a, w, packed, c, parts, gemv_rows, epi):
    if packed.ndim == 3:
        return lambda a, w, packed, c, parts, gemv_rows, epi: gemm_packed(a, packed, w, c,
                                                                          parts, epi)
    if packed.ndim == 1:
        return _narrow

    def plain(a, w, packed, c, parts, gemv_rows, epi):
        if packed.size and a.shape[0] <= gemv_rows:
            gemv(a, packed, c, parts)
        else:
            gemm(a, w, c, parts)
        return False
    return plain


def _narrow(a, w, packed, c, parts, gemv_rows, epi):
    """A weight narrower than one panel, packed flat as its panel [K, WIDTH] then its rows
    wt [N, K] (`templates.gemm.narrow`): `gemv` on the rows for at most `gemv_rows` rows of
    `a`, which reads N of the panel's 32 columns (784 x 10: 1.1 us against 1.9), else
    the tile on the panel."""
    k, n = w.shape
    if a.shape[0] <= gemv_rows:
        gemv(a, packed[k * WIDTH:].reshape((n, k)), c, parts)
        return False
    return gemm_packed(a, packed[:k * WIDTH].reshape((1, k, WIDTH)), w, c, parts, epi)


@njit(nogil=True, parallel=True, link=False)
def _batched_parallel(a, b, c, parts):
    nb = a.shape[0]
    for t in prange(parts):
        for i in range(t, nb, parts):
            _product(a[i], b[i], c[i], 1)


@njit(nogil=True)
def gemm_batched(a, b, c, parts):
    """c[i] = a[i] @ b[i] (3-d), batch entries split between `parts` threads."""
    if parts > 1 and a.shape[0] >= parts and \
            a.size * b.shape[2] >= GEMM_PAR_WORK:
        _batched_parallel(a, b, c, parts)
    else:
        for i in range(a.shape[0]):
            gemm(a[i], b[i], c[i], parts)
