"""Clean training runs whose parameters get gradients too small to move them (issue 31), shared by the tests
of update_health (TP454) and grad_health (TP353 / TP354). Written here, from what torch does:

- a bias in front of BatchNorm: BatchNorm subtracts each channel's batch mean, which removes any constant a
  bias adds, so the bias's gradient is zero but for rounding (about 1e-9): SGD's ``lr * grad`` is far below
  the float32 spacing of the bias's value, and the bias rightly stays where it is;
- a residual block whose last BatchNorm weight starts at zero (timm's ``zero_init_last``): the branch's output
  is multiplied by that zero weight, so every layer inside the branch gets an exactly zero gradient at the
  first step and tiny ones while the weight leaves zero under a learning-rate warm-up;
- an attention key bias: adding the same vector to every key adds ``q·b`` to all of a query's logits, which
  softmax ignores, so its gradient is zero but for rounding; under Adam's warm-up its update
  ``lr * m / (sqrt(v) + eps)`` stays below the spacing of a pretrained bias's values.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def bias_into_batchnorm(layout: str, lr: float, momentum: float, seed: int, steps: int = 30):
    """A Linear or Conv with a bias, feeding BatchNorm, trained by SGD. Returns (model, train)."""
    torch.manual_seed(seed)
    if layout == "linear":
        model = nn.Sequential(nn.Linear(8, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 3))
        data = lambda: (torch.randn(32, 8), torch.randint(0, 3, (32,)))  # noqa: E731
    else:
        model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                              nn.Flatten(), nn.Linear(16, 3))
        data = lambda: (torch.randn(16, 3, 8, 8), torch.randint(0, 3, (16,)))  # noqa: E731
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)

    def train():
        for _ in range(steps):
            x, y = data()
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    return model, train


class Residual(nn.Module):
    """conv-bn-relu-conv-bn plus the identity, the last BatchNorm's weight initialised to zero."""

    def __init__(self, c: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        nn.init.zeros_(self.bn2.weight)

    def forward(self, x):
        return F.relu(x + self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))


def zero_init_resnet(seed: int, momentum: float = 0.9, start_factor: float = 1e-4, steps: int = 40):
    """A small ResNet with zero-initialised last BatchNorms, SGD with a linear warm-up. Returns (model, train)."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), Residual(16), Residual(16),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=momentum, nesterov=momentum > 0, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=start_factor, total_iters=100)

    def train():
        for _ in range(steps):
            x, y = torch.randn(16, 3, 8, 8), torch.randint(0, 3, (16,))
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            sched.step()
    return model, train


class Attention(nn.Module):
    def __init__(self, d: int = 32):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
        return self.o(weights @ v)


def attention_with_key_bias(seed: int, lr: float = 3e-5, steps: int = 40):
    """Self-attention whose (pretrained, order-1) key bias trains under AdamW with a linear warm-up."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 32), Attention(32), nn.Flatten(), nn.Linear(32 * 6, 3))
    with torch.no_grad():
        model[1].k.bias.copy_(torch.empty(32).uniform_(1, 2) * torch.randn(32).sign())
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / 100))

    def train():
        for _ in range(steps):
            x, y = torch.randn(16, 6, 8), torch.randint(0, 3, (16,))
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            sched.step()
    return model, train
