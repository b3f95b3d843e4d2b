"""Train mode is refused, never swapped.

A compiled model computes what the model computes in the mode it is in; Cuvil compiles for
inference, so a model with a submodule in training mode whose forward depends on it
(BatchNorm and InstanceNorm with running statistics, Dropout, or any module whose own
`forward` reads `self.training`) is a one-line error naming that submodule: call
`model.eval()` first. A submodule in training mode whose forward does not read the flag
(Linear, ReLU, a freshly built Sequential of them) compiles as it is.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from cuvil.errors import CuvilError


def depends_on_training(module: nn.Module) -> bool:
    """Whether `module`'s forward computes something else in training mode."""
    if isinstance(module, nn.modules.batchnorm._NormBase):  # BatchNorm*, InstanceNorm*
        return bool(module.track_running_stats)
    if isinstance(module, nn.modules.dropout._DropoutNd):
        return True
    forward = getattr(type(module), "forward", None)
    try:
        code = inspect.unwrap(forward).__code__
    except (AttributeError, TypeError, ValueError):  # a builtin, a callable object
        return False
    return "training" in code.co_names


def refuse_training(model: object) -> None:
    """A CuvilError naming the first submodule of `model` in training mode whose forward
    depends on it; nothing for a model in eval mode, or one that is not a module."""
    if not isinstance(model, torch.nn.Module):
        return
    for name, module in model.named_modules():
        if module.training and depends_on_training(module):
            where = f"submodule {name!r}" if name else "the model"
            raise CuvilError(f"{where} ({type(module).__name__}) of {type(model).__name__} is "
                             "in training mode, and its forward depends on it: call "
                             "model.eval() to compile it for inference")
