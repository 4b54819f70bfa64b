"""Real architectures with random weights, as `torchpact export-check FILE.py:FUNC` takes them.

Recurrent models over float features, a detector that takes a list of images, and transformers'
own models with tiny configs built in code (nothing is downloaded). Each FUNC also names the
dimensions a user would mark dynamic (``DYNAMIC``), which the ground truth in the tests uses.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn.functional as F
from torch import nn

# FUNC -> {input name: {dim: what varies}}: the dims a user exporting by hand would make dynamic
DYNAMIC = {
    "lstm": {"x": {0: "batch", 1: "time"}},
    "gru": {"x": {0: "batch", 1: "time"}},
    "detector": {},
    "resnet": {"pixel_values": {0: "batch", 2: "height", 3: "width"}},
    "convnext": {"pixel_values": {0: "batch", 2: "height", 3: "width"}},
    "vit": {"pixel_values": {0: "batch"}},
    "yolos": {"pixel_values": {0: "batch", 2: "height", 3: "width"}},
    "bert": {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}},
    "gpt2": {"input_ids": {0: "batch", 1: "seq"}},
    "t5": {"input_ids": {0: "batch", 1: "seq"}, "decoder_input_ids": {0: "batch", 1: "seq"}},
    "llama": {"input_ids": {0: "batch", 1: "seq"}},
    "wav2vec2": {"input_values": {0: "batch", 1: "time"}},
}


class Tagger(nn.Module):
    """A recurrent tagger over float features (N, T, F): one output per time step."""

    def __init__(self, rnn: type[nn.RNNBase]):
        super().__init__()
        self.rnn = rnn(6, 16, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y)


def lstm():
    torch.manual_seed(0)
    return Tagger(nn.LSTM).eval(), (torch.randn(2, 10, 6),)


def gru():
    torch.manual_seed(0)
    return Tagger(nn.GRU).eval(), (torch.randn(2, 10, 6),)


class Detector(nn.Module):
    """Takes a list of [3, H, W] images, as torchvision's detection models do: normalises and pads
    them into one batch, and returns a score map and a box per image."""

    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.ReLU())
        self.score = nn.Conv2d(8, 1, 1)
        self.box = nn.Linear(8, 4)

    def forward(self, images):
        h = max(img.shape[1] for img in images)
        w = max(img.shape[2] for img in images)
        batch = torch.stack([F.pad((img - 0.5) / 0.25, (0, w - img.shape[2], 0, h - img.shape[1]))
                             for img in images])
        feats = self.backbone(batch)
        return self.score(feats), self.box(feats.mean((2, 3))).sigmoid()


def detector():
    torch.manual_seed(0)
    return Detector().eval(), ([torch.rand(3, 32, 32), torch.rand(3, 32, 32)],)


def _quiet_hf():
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()


def resnet():
    from transformers import ResNetConfig, ResNetModel

    _quiet_hf()
    torch.manual_seed(0)
    config = ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic")
    return ResNetModel(config).eval(), (), {"pixel_values": torch.randn(2, 3, 32, 32), "return_dict": False}


def convnext():
    from transformers import ConvNextConfig, ConvNextModel

    _quiet_hf()
    torch.manual_seed(0)
    config = ConvNextConfig(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2)
    return ConvNextModel(config).eval(), (), {"pixel_values": torch.randn(2, 3, 32, 32), "return_dict": False}


def vit():
    from transformers import ViTConfig, ViTModel

    _quiet_hf()
    torch.manual_seed(0)
    config = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=64)
    return ViTModel(config).eval(), (), {"pixel_values": torch.randn(2, 3, 32, 32), "return_dict": False}


def yolos():
    from transformers import YolosConfig, YolosForObjectDetection

    _quiet_hf()
    torch.manual_seed(0)
    config = YolosConfig(image_size=[32, 32], patch_size=8, hidden_size=32, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=64, num_detection_tokens=4)
    return (YolosForObjectDetection(config).eval(), (),
            {"pixel_values": torch.randn(2, 3, 32, 32), "return_dict": False})


def bert():
    from transformers import BertConfig, BertModel

    _quiet_hf()
    torch.manual_seed(0)
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    ids = torch.randint(0, 100, (2, 8))
    return BertModel(config).eval(), (), {"input_ids": ids, "attention_mask": torch.ones(2, 8, dtype=torch.long),
                                          "return_dict": False}


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    _quiet_hf()
    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=64, bos_token_id=0,
                        eos_token_id=0)
    return GPT2LMHeadModel(config).eval(), (), {"input_ids": torch.randint(0, 100, (2, 8)), "use_cache": False,
                                                "return_dict": False}


def t5():
    from transformers import T5Config, T5Model

    _quiet_hf()
    torch.manual_seed(0)
    config = T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_decoder_layers=1, num_heads=2,
                      decoder_start_token_id=0)
    return T5Model(config).eval(), (), {"input_ids": torch.randint(0, 100, (2, 8)),
                                        "decoder_input_ids": torch.randint(0, 100, (2, 8)),
                                        "use_cache": False, "return_dict": False}


def llama():
    from transformers import LlamaConfig, LlamaModel

    _quiet_hf()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    return LlamaModel(config).eval(), (), {"input_ids": torch.randint(0, 100, (2, 8)), "use_cache": False,
                                           "return_dict": False}


def wav2vec2():
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    _quiet_hf()
    torch.manual_seed(0)
    config = Wav2Vec2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                            conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                            num_conv_pos_embedding_groups=2, apply_spec_augment=False, vocab_size=32)
    return Wav2Vec2Model(config).eval(), (), {"input_values": torch.randn(2, 400), "return_dict": False}
