"""The launcher of generated CUDA kernels (`cuvil/targets/cuda/runtime/launch.py`): its
block size and grid, by default and as a tiled kernel states them, under the simulator."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from cuvil.targets.cuda.runtime.launch import BLOCK, MAX_BLOCKS, cuda_kernel


def block_shape(grid, out):
    """Each thread writes the block's size at its global index, the grid's size in `grid`."""
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = cuda.blockDim.x
        grid[0] = cuda.gridDim.x


@pytest.mark.parametrize("size, block, per_block", [(40, BLOCK, 0), (40, 32, 0),
                                                    (40, 32, 8), (1, 64, 4096)])
def test_launch_gives_the_block_and_grid_asked(size, block, per_block):
    launcher = cuda_kernel(block=block, per_block=per_block)(block_shape)
    expected_grid = min(-(-size // (per_block or block)), MAX_BLOCKS)
    assert launcher.grid(size) == expected_grid
    grid, out = cuda.to_device(np.zeros(1, np.int64)), cuda.to_device(np.zeros(size, np.int64))
    launcher(grid, out)
    covered = min(size, expected_grid * block)
    assert (out.copy_to_host()[:covered] == block).all()
    assert grid.copy_to_host()[0] == expected_grid
