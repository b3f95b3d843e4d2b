"""The model zoo: small PyTorch models that the tests, the demo and the benchmarks share.

`MODELS[name](batch=...)` returns `(model.eval(), example_inputs)`, built with a fixed seed
so every run sees the same weights and inputs. Extra keywords size a model down for tests.
`HUGGINGFACE` holds models built with the optional `transformers` package (token-id inputs,
HuggingFace's mask code left to torch); `get` finds those too, loops over `MODELS` do not.

    model, inputs = cuvil.zoo.get("mlp")
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from cuvil.errors import CuvilError
from cuvil.zoo import axpy, cnn, gpt2, huggingface, mixer, mlp, mobilenet, resnet, transformer, vit

Factory = Callable[..., tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]

MODELS: dict[str, Factory] = {
    "mlp": mlp.mlp,
    "mlp_gelu": mlp.mlp_gelu,
    "cnn": cnn.cnn,
    "transformer": transformer.transformer,
    "gpt2": gpt2.gpt2,
    "mobilenet": mobilenet.mobilenet,
    "resnet": resnet.resnet,
    "vit": vit.vit,
    "mixer": mixer.mixer,
    "axpy": axpy.axpy,
}
HUGGINGFACE: dict[str, Factory] = {
    "hf_gpt2": huggingface.hf_gpt2,
    "hf_bert": huggingface.hf_bert,
}


def get(name: str, **sizes: Any) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """`(model, example_inputs)` of the zoo model `name`; sizes such as `batch=4` optional."""
    known = {**MODELS, **HUGGINGFACE}
    if name not in known:
        raise CuvilError(f"no zoo model {name!r}; known: {', '.join(known)}")
    return known[name](**sizes)


__all__ = ["HUGGINGFACE", "MODELS", "get"]
