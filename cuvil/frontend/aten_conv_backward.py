"""The aten -> Cuvil mapping of `convolution_backward`. The input's gradient of a 2-d
convolution of stride 1 (dilation 1, one group) is itself a convolution: of the output's
gradient with the weight's in and out channels swapped and its window flipped,

    dx = conv2d(dy, flip(transpose(w, 0, 1), (2, 3)), padding = k - 1 - p)

so the convolution kernels compute it, with the rules that apply to any convolution. The
weight's and the bias's gradients run in torch: one call of `convolution_backward` with the
input's gradient left out of its output mask. Any other convolution's backward runs in
torch as a whole, and so does one whose gradient is narrower than MIN_WIDTH pixels or has
fewer than MIN_CHANNELS channels: there Cuvil's kernels are no faster than torch's and the
split costs a weight flip. At batch 32 on two threads: 64 channels of 16x16, Cuvil's
Winograd kernel 1.9 ms against torch's input gradient 3.7; 128 channels of 8x8, torch's
forward convolution of the flipped weight 2.3 ms against its input gradient 2.2 (and the
flip of 512 channels' weight takes 3 ms); 16 channels of 16x16, Cuvil's 217 us against
torch's 218, plus the flip.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cuvil.frontend.converter import Args, need
from cuvil.ops.nn import pair

if TYPE_CHECKING:
    from cuvil.frontend.importer import Importer

MASK = 10  # the position of `output_mask` among convolution_backward's arguments
MIN_WIDTH = 16  # gradients narrower than this run in torch (see above)
MIN_CHANNELS = 32  # and those with fewer channels


def convolution_backward(ix: Importer, a: Args) -> tuple:
    """(dx, dweight, dbias): dx as the module says, the others from torch (None where the
    output mask skips them)."""
    mask = [bool(m) for m in a["output_mask"]]
    w = ix.tensor(a["weight"])
    kernel, padding = ix.type(w).shape[2:], pair(a["padding"])
    need(mask[0], "a convolution backward without the input's gradient")
    need(ix.type(w).rank == 4 and not a["transposed"] and a["groups"] == 1 and
         pair(a["stride"]) == (1, 1) and pair(a["dilation"]) == (1, 1) and
         not any(a["output_padding"]), "a gradient of a strided, dilated, grouped or "
         "transposed convolution")
    need(all(isinstance(k, int) and 0 <= p < k for k, p in zip(kernel, padding, strict=True)),
         "a padding as wide as the window")
    _, channels, _, width = ix.type(ix.tensor(a["input"])).shape
    need(isinstance(width, int) and width >= MIN_WIDTH and channels >= MIN_CHANNELS,
         f"an input gradient narrower than {MIN_WIDTH} pixels or with fewer than "
         f"{MIN_CHANNELS} channels (torch's kernels are as fast)")
    swapped = ix.add("transpose", [w], {"dim0": 0, "dim1": 1})
    flipped = ix.add("flip", [swapped], {"dims": (2, 3)})
    dx = ix.add("conv2d", [ix.tensor(a["grad_output"]), flipped], {
        "stride": (1, 1), "dilation": (1, 1), "groups": 1,
        "padding": tuple(k - 1 - p for k, p in zip(kernel, padding, strict=True))})
    args = list(ix.node.args)
    args[MASK] = [False, *mask[1:]]
    rest = [ix.torch_op(ix.node, i, args=tuple(args)) if mask[i] else None for i in (1, 2)]
    return (dx, *rest)


CONV_BACKWARD_OPS = {"convolution_backward": convolution_backward}
