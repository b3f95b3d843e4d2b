"""`cuvil.compile(model, example_inputs, training=True)`: a module to train, compiled by Cuvil.

The module returned runs `model`'s forward through `torch.compile(model, backend="cuvil")`:
TorchDynamo captures it, AOTAutograd derives the backward graph, and Cuvil compiles both
(`cuvil.dynamo`); `loss.backward()` runs the compiled backward. Its parameters and buffers
are `model`'s own, so `torch.optim` optimizers, `state_dict` and `load_state_dict` work on it
as on `model`, and training it trains `model`.

With example inputs and the compile caches on, the graphs are compiled now rather than at the
first step: a copy of `model` takes one forward and backward on them, which fills Cuvil's
caches, so the first real step's compiles are cache hits (~0.3 s a graph). The copy is what
runs: `model`'s parameters, gradients and buffers (batch norm's running statistics) are not
touched. Shapes are Dynamo's business: a new batch size recompiles, or, with
`dynamic_shapes` given, Dynamo marks sizes dynamic from the start (`dynamic=True`).
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from cuvil.errors import CuvilError


class TrainingModule(nn.Module):
    """`module` with its forward compiled by Cuvil through TorchDynamo and AOTAutograd; its
    state is `module`'s (`state_dict` without a prefix)."""

    def __init__(self, module: nn.Module, options: dict, dynamic: bool | None):
        super().__init__()
        from cuvil.dynamo import backend

        self.module = module
        self.compiled = torch.compile(module, dynamic=dynamic,
                                      backend=functools.partial(backend, options=options))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.compiled(*args, **kwargs)

    def state_dict(self, *args: Any, **kwargs: Any) -> dict:
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False):
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)


def compile_for_training(model: Any, example_inputs: Sequence[Any] | None = None,
                         **options: Any) -> TrainingModule:
    """`model` as a `TrainingModule`, its graphs compiled ahead on a copy when example
    inputs are given (module docstring). `options` are `cuvil.compile`'s."""
    from cuvil.pipeline import compile as compile_inference

    if not isinstance(model, nn.Module):
        raise CuvilError(f"training=True compiles a torch.nn.Module, not {type(model).__name__}")
    inspect.signature(compile_inference).bind(model, example_inputs, **options)  # names
    dynamic = True if options.pop("dynamic_shapes", None) is not None else None
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    module = TrainingModule(model, options, dynamic)
    if example_inputs is not None and options.get("cache", True):
        _compile_ahead(model, tuple(example_inputs), options, dynamic)
    return module


def _compile_ahead(model: nn.Module, example_inputs: tuple, options: dict,
                   dynamic: bool | None) -> None:
    """One forward and backward of a copy of `model` on `example_inputs` (copies too), as
    the module returned would run them: its graphs go to Cuvil's caches."""
    twin = copy.deepcopy(model)
    inputs = tuple(x.detach().clone() if isinstance(x, torch.Tensor) else x
                   for x in example_inputs)
    out = TrainingModule(twin, options, dynamic)(*inputs)
    leaves = [t for t in _tensors(out) if t.requires_grad]
    if leaves:
        torch.autograd.backward(leaves, [torch.ones_like(t) for t in leaves])


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in a (nested) output."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        return [t for v in value for t in _tensors(v)]
    return []
