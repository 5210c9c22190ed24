"""Small random-initialised models built from real ``transformers`` code (no download).

Each builder returns a :class:`RealModel`: an ``nn.Module`` whose forward takes plain
tensors and returns one plain tensor (what ``torch.compile`` and ``torch.export`` see),
the example inputs, and the norm weight of a middle layer that the verdict tests
perturb. Every norm weight is drawn at random (HF initialises them all to ones), so that
each holds different values and a weight can be told from another by its checksum.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402

HIDDEN = 64
LAYERS = 2
HEADS = 4
VOCAB = 96
SEQ = 12
BATCH = 2


@dataclasses.dataclass
class RealModel:
    name: str
    module: nn.Module
    inputs: tuple[torch.Tensor, ...]
    norm_path: str
    """Dotted path of the norm module (in a middle layer) whose weight is perturbed."""
    norm_op: str
    """What that norm's kernel is named after (Inductor names a fused kernel after its ATen ops)."""

    @property
    def norm_weight(self) -> nn.Parameter:
        return self.module.get_submodule(self.norm_path).weight

    def eager(self) -> torch.Tensor:
        with torch.no_grad():
            return self.module(*self.inputs)


class LogitsOnly(nn.Module):
    """Calls an HF model with keyword arguments and hands back one tensor of its output."""

    def __init__(self, model: nn.Module, field: str, input_names: tuple[str, ...] = ("input_ids",), **kwargs):
        super().__init__()
        self.model = model
        self.field = field
        self.input_names = input_names
        self.kwargs = kwargs

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(**dict(zip(self.input_names, inputs)), **self.kwargs), self.field)


def _randomise_norms(model: nn.Module, seed: int) -> None:
    """Draw every norm's affine parameters (and a BatchNorm's running stats) at random."""
    g = torch.Generator().manual_seed(seed)

    def draw(t: torch.Tensor, lo: float, hi: float) -> None:
        t.copy_(torch.empty_like(t).uniform_(lo, hi, generator=g))

    with torch.no_grad():
        for module in model.modules():
            if "norm" not in type(module).__name__.lower():
                continue
            if getattr(module, "weight", None) is not None:
                draw(module.weight, 0.5, 1.5)
            if getattr(module, "bias", None) is not None:
                draw(module.bias, -0.2, 0.2)
            if getattr(module, "running_var", None) is not None:
                draw(module.running_mean, -0.2, 0.2)
                draw(module.running_var, 0.5, 1.5)


def _token_ids(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)


def gpt2() -> RealModel:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=32, bos_token_id=0, eos_token_id=0, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).eval()
    _randomise_norms(model, 1)
    return RealModel("gpt2", LogitsOnly(model, "logits", use_cache=False).eval(), (_token_ids(2),),
                     "model.transformer.h.1.ln_1", "native_layer_norm")


def llama() -> RealModel:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=HEADS // 2, max_position_embeddings=32)
    model = LlamaForCausalLM(cfg).eval()
    _randomise_norms(model, 1)
    return RealModel("llama", LogitsOnly(model, "logits", use_cache=False).eval(), (_token_ids(2),),
                     "model.model.layers.1.input_layernorm", "rsqrt")  # RMSNorm: x * rsqrt(mean(x^2) + eps)


def bert() -> RealModel:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                     intermediate_size=2 * HIDDEN, max_position_embeddings=32, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)
    model = BertModel(cfg, add_pooling_layer=False).eval()
    _randomise_norms(model, 1)
    # A padded batch, as BERT is used: the second sequence ends in padding.
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[1, SEQ - 3:] = 0
    return RealModel("bert", LogitsOnly(model, "last_hidden_state", ("input_ids", "attention_mask")).eval(),
                     (_token_ids(2), mask),
                     "model.encoder.layer.1.attention.output.LayerNorm", "native_layer_norm")


def resnet() -> RealModel:
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.manual_seed(0)
    cfg = ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic",
                       num_labels=10)
    model = ResNetForImageClassification(cfg).eval()
    _randomise_norms(model, 1)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, 3, 32, 32, generator=g)
    return RealModel("resnet", LogitsOnly(model, "logits", ("pixel_values",)).eval(), (x,),
                     "model.resnet.encoder.stages.1.layers.0.layer.0.normalization", "native_batch_norm")


BUILDERS: dict[str, Callable[[], RealModel]] = {"gpt2": gpt2, "llama": llama, "bert": bert, "resnet": resnet}
