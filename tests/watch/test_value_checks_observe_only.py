"""The value checks TP360, TP465, TP466, TP467 and TP468 only observe: a script that triggers all of them
(the causal probe runs its two forwards on the side) trains bit-for-bit as under plain python, and draws the
same numbers from torch's, Python's and NumPy's generators afterwards."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

SCRIPT = """
import random, sys
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0); random.seed(0); np.random.seed(0)
V, T, D = 11, 6, 12

class LeakyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.qkv, self.out = nn.Embedding(V, D), nn.Linear(D, 3 * D), nn.Linear(D, V)
        self.drop = nn.Dropout(0.2)
        self.norm = nn.BatchNorm1d(D, momentum=0.99)
        self.rnn = nn.GRU(D, D)                                   # fed (batch, seq, feature)
        self.critic = nn.utils.spectral_norm(nn.Linear(D, 1))
        self.kind = nn.Linear(D, 3)

    def forward(self, idx, targets):
        b, t = idx.shape
        x = self.drop(self.emb(idx))
        x = self.norm(x.transpose(1, 2)).transpose(1, 2)
        q, k, v = (z.view(b, t, 2, D // 2).transpose(1, 2) for z in self.qkv(x).split(D, 2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.1).reshape(b, t, D)  # leaks
        h, _ = self.rnn(x + y)
        logits = self.out(self.drop(h))
        aux = F.cross_entropy(self.kind(h[:, -1]), idx[:, 0] % 3)       # a per-sequence target: (batch,)
        return logits, F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1)) + aux

model = LeakyLM()
model.eval()
with torch.no_grad():
    model.critic(torch.randn(4, D))                 # evaluated before any training forward
model.train()
data = torch.randint(0, V, (48, T + 1))
loader = DataLoader(TensorDataset(data[:, :-1], data[:, 1:]), batch_size=8, shuffle=True)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.1)
for epoch in range(4):
    for x, y in loader:
        opt.zero_grad()
        _, loss = model(x + (random.random() > 2) + int(np.random.rand() > 2), y)
        loss.backward()
        opt.step()
        sched.step()                                  # per batch
state = model.state_dict()
state["after"] = torch.tensor([torch.rand(()).item(), random.random(), float(np.random.rand())], dtype=torch.float64)
torch.save(state, sys.argv[1])
"""


def test_training_and_random_streams_are_bit_identical(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    plain, watched, report = tmp_path / "plain.pt", tmp_path / "watched.pt", tmp_path / "report.json"
    subprocess.run([sys.executable, str(script), str(plain)], check=True, timeout=300)
    out = subprocess.run([sys.executable, "-m", "torchpact", "run", "--quiet", "--sample-every", "1", "--format",
                          "json", "--output", str(report), str(script), str(watched)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 1, out.stderr  # TP468 is an error
    found = {f["code"] for f in json.loads(report.read_text())["findings"]}
    assert {"TP360", "TP465", "TP466", "TP467", "TP468"} <= found, found
    a, b = torch.load(plain), torch.load(watched)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
