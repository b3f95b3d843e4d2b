"""bf16 values at the torch boundary: numpy has no bfloat16, so a bf16 array holds its
bits as uint16, which torch views as bfloat16.

Imports only numpy and torch: running a stored program needs it, and never the IR.
"""

from __future__ import annotations

import numpy as np
import torch

BF16_BITS = np.dtype(np.uint16)  # how a bf16 array is stored


def to_tensor(array: np.ndarray) -> torch.Tensor:
    """The torch tensor over an array: a bf16 one's uint16 bits seen as bfloat16."""
    t = torch.from_numpy(array)
    return t.view(torch.bfloat16) if array.dtype == BF16_BITS else t


def from_tensor(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor's array: a bfloat16 one's bits as uint16 (numpy has no bf16)."""
    return t.view(torch.uint16).numpy() if t.dtype == torch.bfloat16 else t.numpy()
