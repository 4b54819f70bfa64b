"""iamwangyabin/S-Prompts#2: in continual learning, each new task built its optimizer from all of
the network's parameters (`self._network.parameters()`), with weight decay, after setting
`requires_grad = False` on the prompts learnt for earlier tasks; the report shows the frozen
prompts' mean shrinking while later tasks train, and the fix gives the optimizer only the
parameters that require grad. The optimizer reaches frozen parameters whose gradient is a zero
tensor rather than None, as torch 1.x's `zero_grad()` (default `set_to_none=False`) left them.

Here: task A trains an encoder and head A; task B freezes both, adds head B and builds a new Adam
(L2 weight decay) over all parameters, zeroing gradients with `set_to_none=False` as the original's
torch did. The frozen encoder and head A move and task A's accuracy falls although nothing trains
them. `fixed` builds task B's optimizer from the parameters that require grad.
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = sys.argv[1:] == ["fixed"]
torch.manual_seed(0)


class MultiTaskNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU())
        self.heads = nn.ModuleDict({"a": nn.Linear(32, 4)})

    def forward(self, x, task):
        return self.heads[task](self.encoder(x))


def task_data(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(512, 16, generator=g)
    return x, (x @ torch.randn(16, 4, generator=g)).argmax(1)


def train(model, optimizer, task, x, y, epochs):
    for _epoch in range(epochs):
        for start in range(0, len(x), 32):
            optimizer.zero_grad(set_to_none=False)
            loss = F.cross_entropy(model(x[start:start + 32], task), y[start:start + 32])
            loss.backward()
            optimizer.step()


def accuracy(model, task, x, y):
    with torch.no_grad():
        return (model(x, task).argmax(1) == y).float().mean().item()


model = MultiTaskNet()
(xa, ya), (xb, yb) = task_data(1), task_data(2)
train(model, torch.optim.Adam(model.parameters(), lr=2e-3, weight_decay=5e-4), "a", xa, ya, epochs=8)
before = accuracy(model, "a", xa, ya)
encoder_before = [p.detach().clone() for p in model.encoder.parameters()]

for p in model.parameters():
    p.requires_grad = False
model.heads["b"] = nn.Linear(32, 4)
params = [p for p in model.parameters() if p.requires_grad] if FIXED else model.parameters()
train(model, torch.optim.Adam(params, lr=2e-3, weight_decay=5e-4), "b", xb, yb, epochs=8)

drift = max((p - q).abs().max().item() for p, q in zip(model.encoder.parameters(), encoder_before, strict=True))
print(f"task A accuracy {before:.2f} before task B, {accuracy(model, 'a', xa, ya):.2f} after; "
      f"largest change of a frozen encoder weight {drift:.3f}; task B accuracy {accuracy(model, 'b', xb, yb):.2f}")
