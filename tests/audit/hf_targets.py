"""Tiny, randomly initialised configs of real transformers models (nothing is downloaded)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from transformers import (
    BertConfig,
    BertModel,
    GPT2Config,
    GPT2LMHeadModel,
    ViTConfig,
    ViTModel,
)
from transformers.utils import logging as hf_logging

hf_logging.set_verbosity_error()


def _gpt2():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=64,
                        bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config).eval()


def gpt2():
    """Shipped the way that works: no cache object, a tuple output."""
    return _gpt2(), (torch.randint(0, 100, (2, 8)),), {"use_cache": False, "return_dict": False}


def gpt2_with_cache():
    """The default call: the output carries a DynamicCache."""
    return _gpt2(), (torch.randint(0, 100, (2, 8)),)


def bert():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    ids = torch.randint(0, 100, (2, 8))
    return BertModel(config).eval(), (ids,), {"attention_mask": torch.ones(2, 8, dtype=torch.long),
                                              "return_dict": False}


def vit():
    torch.manual_seed(0)
    config = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=64)
    return ViTModel(config).eval(), (torch.randn(2, 3, 32, 32),), {"return_dict": False}
