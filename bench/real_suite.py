"""Library models as users bring them, with random weights: the suite of `real_models.py`.

`SUITE` maps a name to a builder; `SUITE[name]()` gives `(model, inputs at batch 1, inputs at
a larger batch)`, the model in eval mode, built from torchvision, timm or transformers as
they ship (in-place activations and all) or from `nn.LSTM`/`nn.GRU`. Nothing is downloaded:
`weights=None`/`pretrained=False`, and transformers models come from small configs. Inputs
are small, so that the whole suite compiles and runs in minutes on two cores.
`first_tensor` picks the tensor to compare from whatever a model returns.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")

BATCH = 8  # the larger batch
VOCAB = 500
TOKENS = 16

Built = tuple[nn.Module, tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]


def _images(model: nn.Module, size: int, batch: int = BATCH) -> Built:
    return (model.eval(), (torch.randn(1, 3, size, size),),
            (torch.randn(batch, 3, size, size),))


def _tokens(model: nn.Module) -> Built:
    return (model.eval(), (torch.randint(0, VOCAB, (1, TOKENS)),),
            (torch.randint(0, VOCAB, (BATCH, TOKENS)),))


def resnet18() -> Built:
    import torchvision

    return _images(torchvision.models.resnet18(weights=None), 64)


def mobilenet_v3_small() -> Built:
    import torchvision

    return _images(torchvision.models.mobilenet_v3_small(weights=None), 96)


def efficientnet_b0() -> Built:
    import torchvision

    return _images(torchvision.models.efficientnet_b0(weights=None), 64, batch=4)


def regnet_x_400mf() -> Built:
    import torchvision

    return _images(torchvision.models.regnet_x_400mf(weights=None), 64)


def convnext_atto() -> Built:
    import timm

    return _images(timm.create_model("convnext_atto", pretrained=False), 64)


def deit_tiny() -> Built:
    import timm

    model = timm.create_model("deit_tiny_patch16_224", pretrained=False, img_size=64)
    return _images(model, 64)


def bert() -> Built:
    import transformers

    return _tokens(transformers.BertModel(transformers.BertConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
        vocab_size=VOCAB, max_position_embeddings=64)))


def gpt2() -> Built:
    import transformers

    return _tokens(transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=VOCAB, n_positions=64, use_cache=False,
        bos_token_id=0, eos_token_id=0)))


def llama() -> Built:
    import transformers

    return _tokens(transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64,
        use_cache=False)))


def t5_encoder() -> Built:
    import transformers

    return _tokens(transformers.T5EncoderModel(transformers.T5Config(
        d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, vocab_size=VOCAB)))


def whisper_encoder() -> Built:
    import transformers
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    config = transformers.WhisperConfig(
        d_model=64, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=128,
        decoder_layers=1, decoder_attention_heads=2, decoder_ffn_dim=128, num_mel_bins=16,
        max_source_positions=32, vocab_size=VOCAB, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, decoder_start_token_id=1)
    encoder = WhisperEncoder(config).eval()
    frames = 2 * config.max_source_positions  # the encoder accepts exactly this length
    return (encoder, (torch.randn(1, 16, frames),), (torch.randn(BATCH, 16, frames),))


class Recurrent(nn.Module):
    """A one-layer LSTM or GRU over a sequence, then a linear head on every step."""

    def __init__(self, cell: type[nn.RNNBase]):
        super().__init__()
        self.rnn = cell(32, 64, batch_first=True)
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0])


def _recurrent(cell: type[nn.RNNBase]) -> Built:
    return (Recurrent(cell).eval(), (torch.randn(1, 12, 32),), (torch.randn(BATCH, 12, 32),))


def lstm() -> Built:
    return _recurrent(nn.LSTM)


def gru() -> Built:
    return _recurrent(nn.GRU)


SUITE: dict[str, Callable[[], Built]] = {
    "resnet18": resnet18, "mobilenet_v3_small": mobilenet_v3_small,
    "efficientnet_b0": efficientnet_b0, "regnet_x_400mf": regnet_x_400mf,
    "convnext_atto": convnext_atto, "deit_tiny": deit_tiny, "bert": bert, "gpt2": gpt2,
    "llama": llama, "t5_encoder": t5_encoder, "whisper_encoder": whisper_encoder,
    "lstm": lstm, "gru": gru,
}
QUICK = ("resnet18", "bert", "lstm")


def build(name: str) -> Built:
    """`SUITE[name]()` with torch's generator seeded: the same weights and inputs each run."""
    torch.manual_seed(0)
    return SUITE[name]()


def first_tensor(value) -> torch.Tensor:
    """The tensor to compare: a tensor itself, else the first one a model's output holds
    (`last_hidden_state`/`logits` of a transformers output, element 0 of a tuple)."""
    if isinstance(value, torch.Tensor):
        return value
    if hasattr(value, "to_tuple"):
        value = value.to_tuple()
    elif isinstance(value, dict):
        value = list(value.values())
    return first_tensor(value[0])
