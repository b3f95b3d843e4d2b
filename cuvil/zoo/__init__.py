"""The model zoo: small PyTorch models that the tests, the demo and the benchmarks share.

`MODELS[name](batch=...)` returns `(model.eval(), example_inputs)`, built with a fixed seed
so every run sees the same weights and inputs. Extra keywords size a model down for tests.

    model, inputs = cuvil.zoo.get("mlp")
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from cuvil.errors import CuvilError
from cuvil.zoo import cnn, gpt2, mlp, mobilenet, transformer

Factory = Callable[..., tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]

MODELS: dict[str, Factory] = {
    "mlp": mlp.mlp,
    "mlp_gelu": mlp.mlp_gelu,
    "cnn": cnn.cnn,
    "transformer": transformer.transformer,
    "gpt2": gpt2.gpt2,
    "mobilenet": mobilenet.mobilenet,
}


def get(name: str, **sizes: Any) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """`(model, example_inputs)` of the zoo model `name`; sizes such as `batch=4` optional."""
    if name not in MODELS:
        raise CuvilError(f"no zoo model {name!r}; known: {', '.join(MODELS)}")
    return MODELS[name](**sizes)


__all__ = ["MODELS", "get"]
