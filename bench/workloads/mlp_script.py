"""A 300-step tiny MLP regression: start-up dominated, the shape of many tutorial scripts."""

import os

import torch
import torch.nn as nn

torch.manual_seed(0)
torch.set_num_threads(int(os.environ.get("TP_BENCH_THREADS", "1")))
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
x = torch.randn(256, 8)
y = x.sum(dim=1, keepdim=True).sin()
for _step in range(int(os.environ.get("TP_BENCH_STEPS", "300"))):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
print(f"loss {loss.item():.6f}")
