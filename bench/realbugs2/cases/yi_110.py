"""01-ai/Yi#110: the causal-LM loss did not ignore padding, because the labels kept the pad token
ids instead of the ignore index (-100). The same report in hengjiUSTC/learn-llm#2: without
replacing the pad ids in the labels the loss drops fast, and with them replaced it is much higher.

Here: a small GRU language model on right-padded batches of short sequences (4-10 real tokens in 24
positions, pad id 0). The labels are the shifted input ids, pads included, so most of the loss is
predicting pad after pad: the reported loss looks low while the loss on the real tokens lags.
`fixed` sets the labels of pad positions to -100 (`F.cross_entropy`'s default `ignore_index`).
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = sys.argv[1:] == ["fixed"]
torch.manual_seed(0)
PAD, VOCAB, WIDTH = 0, 24, 24


def batch(n):
    tokens = torch.empty(n, 10, dtype=torch.long)
    tokens[:, 0] = torch.randint(1, VOCAB, (n,))
    for t in range(1, 10):
        jump = torch.rand(n) < 0.2
        tokens[:, t] = torch.where(jump, torch.randint(1, VOCAB, (n,)), tokens[:, t - 1] % (VOCAB - 1) + 1)
    lengths = torch.randint(4, 11, (n, 1))
    ids = torch.full((n, WIDTH), PAD)
    ids[:, :10] = tokens.masked_fill(torch.arange(10) >= lengths, PAD)
    return ids


class TinyLM(nn.Module):
    def __init__(self, dim=48):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.rnn = nn.GRU(dim, dim, batch_first=True)
        self.lm_head = nn.Linear(dim, VOCAB)

    def forward(self, ids):
        return self.lm_head(self.rnn(self.embed(ids))[0])


model = TinyLM()
optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
for _step in range(120):
    input_ids = batch(32)
    labels = input_ids[:, 1:].clone()
    if FIXED:
        labels[labels == PAD] = -100
    optimizer.zero_grad()
    loss = F.cross_entropy(model(input_ids[:, :-1]).flatten(0, 1), labels.flatten())
    loss.backward()
    optimizer.step()

test = batch(256)
with torch.no_grad():
    real = test[:, 1:] != PAD
    real_loss = F.cross_entropy(model(test[:, :-1])[real], test[:, 1:][real])
print(f"training loss {loss.item():.3f}; loss on the real (non-pad) next tokens {real_loss.item():.3f}")
