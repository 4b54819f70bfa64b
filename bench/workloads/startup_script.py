"""No training step: imports torch and builds a model and its optimizer (what every script does before training).
Judged by the CPU seconds `torchpact run` adds (start-up and shut-down), not by a ratio."""

import os

import torch
import torch.nn as nn

torch.set_num_threads(int(os.environ.get("TP_BENCH_THREADS", "1")))
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
print(sum(p.numel() for p in model.parameters()))
