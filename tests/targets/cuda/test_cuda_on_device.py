"""Where a GPU is present: every CUDA kernel test again, on the device (a subprocess with
the simulator off, `CUVIL_CUDA_DEVICE=1`). Skipped without a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
KERNEL_TESTS = ("test_cuda_kernels.py", "test_cuda_conv.py", "test_cuda_pool.py",
                "test_cuda_attention.py")


@pytest.mark.gpu
def test_cuda_kernels_on_the_device():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["CUVIL_CUDA_DEVICE"] = "1"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *(str(HERE / f) for f in KERNEL_TESTS)], capture_output=True,
                          text=True, timeout=900, env=env, cwd=HERE.parents[2])
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
