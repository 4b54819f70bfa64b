"""A small token classifier to ship with trace / torch.export / ONNX: `torchpact export-check
examples/export_target.py:make`.

It carries two bugs on purpose: the model is handed over in training mode (its Dropout is live), and
`forward` averages over the sequence with a Python number read from the input's shape, which
`torch.jit.trace` and `torch.export` turn into the example's sequence length.
"""

import torch
from torch import nn


class TokenClassifier(nn.Module):
    def __init__(self, vocab: int = 64, dim: int = 32, classes: int = 4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mix = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Dropout(0.1))
        self.head = nn.Linear(dim, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.mix(self.embed(ids))
        length = float(ids.shape[1])  # a Python number: trace and torch.export freeze it
        return self.head(h.sum(dim=1) / length)


def make():
    torch.manual_seed(0)
    model = TokenClassifier()  # no model.eval(): Dropout stays live
    ids = torch.randint(0, 64, (4, 12))
    return model, (ids,)
