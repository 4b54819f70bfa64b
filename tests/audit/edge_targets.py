"""Models written here for the edges of the input distribution, each with its documented input range.

Each FUNC returns ``(model, args)`` as `torchpact export-check FILE.py:FUNC` takes it. ``RANGES`` is
what each model's docstring promises, per input and dim: ``(smallest, largest)`` size it takes. The
ground truth in ``ground_truth.py`` picks its own sizes from these ranges, never from torchpact.
"""


import torch
from torch import nn

# FUNC -> {input name: {dim: (what varies, smallest, largest)}}
RANGES = {
    "scaled_positions": {"ids": {0: ("batch", 1, 8), 1: ("seq", 1, 96)}},
    "four_strides": {"x": {0: ("batch", 1, 8), 2: ("height", 1, 160), 3: ("width", 1, 160)}},
    "time_major_gru": {"x": {0: ("time", 1, 60), 1: ("batch", 1, 8)}},
    "harmless_branch": {"x": {0: ("batch", 1, 200)}},
    "wide_kernel": {"x": {0: ("batch", 1, 8), 2: ("length", 5, 200)}},
}


class ScaledPositions(nn.Module):
    """Token ids (N, T), any T from 1 to 96, to features (N, T, 16) with sinusoidal positions.

    Past ``max_cached`` positions the frequencies are rescaled (dynamic NTK scaling, as Llama's
    dynamic RoPE does), so that long inputs keep positions apart.
    """

    def __init__(self, vocab: int = 50, dim: int = 16, max_cached: int = 40, base: float = 10000.0):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.out = nn.Linear(dim, dim)
        self.dim, self.max_cached, self.base = dim, max_cached, base

    def forward(self, ids):
        seq_len = ids.shape[1]
        base = self.base
        if seq_len > self.max_cached:  # CACHE_LINE
            base = base * (seq_len / self.max_cached) ** (self.dim / (self.dim - 2))
        inv_freq = 1.0 / base ** (torch.arange(0, self.dim, 2, dtype=torch.float32) / self.dim)
        angles = torch.arange(seq_len, dtype=torch.float32)[:, None] * inv_freq
        positions = torch.cat([angles.sin(), angles.cos()], -1)
        return self.out(self.embed(ids) + positions)


class FourStrides(nn.Module):
    """Images (N, 3, H, W) of any size from 1x1 to 160x160: four stride-2 convolutions, a per-pixel
    head, and the image's mean feature added back to every pixel."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(*[nn.Sequential(nn.Conv2d(3 if i == 0 else 8, 8, 3, stride=2, padding=1), nn.ReLU())
                                    for i in range(4)])
        self.head = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        y = self.body(x)
        return self.head(y) + y.mean((2, 3), keepdim=True)[:, :2]


class TimeMajorGRU(nn.Module):
    """A tagger over time-major features (T, N, 6), any T from 1 to 60 and N from 1 to 8, as
    ``nn.GRU``'s default ``batch_first=False`` takes them."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(6, 16)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y)


class HarmlessBranch(nn.Module):
    """Rows (N, 8), any N from 1 to 200; a branch on the batch size that computes the same either way."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        n = x.shape[0]
        if n > 64:  # HARMLESS_LINE
            x = x.contiguous()
        return self.fc(x)


class WideKernel(nn.Module):
    """Signals (N, 2, L), any L from 5 up: a kernel of 5 with no padding needs 5 samples."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(2, 4, 5)

    def forward(self, x):
        return self.conv(x).mean(-1)


def scaled_positions():
    torch.manual_seed(0)
    return ScaledPositions().eval(), (torch.randint(0, 50, (2, 8)),)


def four_strides():
    torch.manual_seed(0)
    return FourStrides().eval(), (torch.randn(2, 3, 64, 64),)


def time_major_gru():
    torch.manual_seed(0)
    return TimeMajorGRU().eval(), (torch.randn(10, 2, 6),)




def harmless_branch():
    torch.manual_seed(0)
    return HarmlessBranch().eval(), (torch.randn(4, 8),)


def wide_kernel():
    torch.manual_seed(0)
    return WideKernel().eval(), (torch.randn(2, 2, 40),)
