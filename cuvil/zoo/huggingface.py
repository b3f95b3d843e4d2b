"""Small HuggingFace `transformers` models built from configs with random weights (nothing
is downloaded): GPT-2 with its LM head and BERT's encoder, fed token ids.

`transformers` is imported inside the factories, so the zoo imports without it. Each model
is wrapped to return one tensor (GPT-2's logits, BERT's last hidden state), as the other
zoo models do; `cuvil.compile` of the bare HuggingFace model returns its output object.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from cuvil.errors import CuvilError

VOCAB = 1000


class Field(nn.Module):
    """`model(ids).<field>`: one tensor out of a HuggingFace output object."""

    def __init__(self, model: nn.Module, field: str):
        super().__init__()
        self.model, self.field = model, field

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(ids), self.field)


def _transformers():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import transformers
    except ImportError:
        raise CuvilError("the zoo's HuggingFace models need the `transformers` package "
                         "(pip install transformers)") from None
    return transformers


def _tokens(batch: int, seq: int) -> tuple[torch.Tensor]:
    return (torch.randint(0, VOCAB, (batch, seq)),)


def hf_gpt2(batch: int = 8, seq: int = 64, layers: int = 4, dim: int = 128, heads: int = 4):
    """`GPT2LMHeadModel` without the key/value cache; returns the logits."""
    transformers = _transformers()
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=layers, n_embd=dim, n_head=heads,
                                     vocab_size=VOCAB, n_positions=max(seq, 128),
                                     use_cache=False)
    model = Field(transformers.GPT2LMHeadModel(config), "logits")
    return model.eval(), _tokens(batch, seq)


def hf_bert(batch: int = 8, seq: int = 64, layers: int = 4, dim: int = 128, heads: int = 4):
    """`BertModel` (encoder and pooler); returns the last hidden state."""
    transformers = _transformers()
    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=dim, num_hidden_layers=layers,
                                     num_attention_heads=heads, intermediate_size=4 * dim,
                                     vocab_size=VOCAB, max_position_embeddings=max(seq, 128))
    model = Field(transformers.BertModel(config), "last_hidden_state")
    return model.eval(), _tokens(batch, seq)
