"""jsbaan/transformer-from-scratch#4, fixed by #6: after scaled dot-product attention the values,
shaped (batch, heads, seq, head_dim), were merged by `reshape(batch, seq, hidden)` without first
permuting heads and positions back, so each token's output is made of chunks of other positions.
In a causal decoder that leaks later tokens into earlier positions; the author notes the training
test still passed because the model learns to use what it is given.

Here: a one-layer causal decoder on sequences from a noisy "next = previous + 1" chain, with the
same merge. Teacher-forced loss ends lower than the chain allows (the model reads the
token it must predict), and prediction from a prefix alone, as in generation, is worse. `fixed`
permutes (0, 2, 1, 3) before the reshape.
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = sys.argv[1:] == ["fixed"]
torch.manual_seed(0)
VOCAB, SEQ = 16, 16


class CausalSelfAttention(nn.Module):
    def __init__(self, hidden=32, heads=4):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x):
        batch, seq, hidden = x.shape
        q, k, v = self.qkv(x).split(hidden, dim=-1)
        q, k, v = (t.view(batch, seq, self.heads, self.head_dim).permute(0, 2, 1, 3) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / self.head_dim ** 0.5
        mask = torch.ones(seq, seq, dtype=torch.bool).tril()
        values = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        if FIXED:
            values = values.permute(0, 2, 1, 3)
        return self.proj(values.reshape(batch, seq, hidden))


class TinyDecoder(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, hidden)
        self.pos = nn.Embedding(SEQ, hidden)
        self.attn = CausalSelfAttention(hidden)
        self.mlp = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, 64), nn.GELU(), nn.Linear(64, hidden))
        self.head = nn.Linear(hidden, VOCAB)

    def forward(self, ids):
        h = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        h = h + self.attn(h)
        return self.head(h + self.mlp(h))


def chain(n):
    ids = torch.empty(n, SEQ + 1, dtype=torch.long)
    ids[:, 0] = torch.randint(0, VOCAB, (n,))
    for t in range(1, SEQ + 1):
        jump = torch.rand(n) < 0.3
        ids[:, t] = torch.where(jump, torch.randint(0, VOCAB, (n,)), (ids[:, t - 1] + 1) % VOCAB)
    return ids


model = TinyDecoder()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
for _step in range(200):
    ids = chain(32)
    optimizer.zero_grad()
    loss = F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    optimizer.step()

p_next, p_other = torch.tensor(0.7 + 0.3 / VOCAB), torch.tensor(0.3 / VOCAB)
floor = -p_next * p_next.log() - (VOCAB - 1) * p_other * p_other.log()  # entropy of the chain
test = chain(512)
with torch.no_grad():
    forced = F.cross_entropy(model(test[:, :-1]).flatten(0, 1), test[:, 1:].flatten())
    hits = [(model(test[:, :t])[:, -1].argmax(-1) == test[:, t]).float().mean() for t in range(1, SEQ)]
    edited = test[:1, :SEQ].clone()
    edited[0, 3] = (edited[0, 3] + 1) % VOCAB
    leak = (model(edited)[0, :3] - model(test[:1, :SEQ])[0, :3]).abs().max().item()
print(f"teacher-forced test loss {forced.item():.3f} (the chain's entropy {floor.item():.3f} is the floor); "
      f"accuracy predicting from the prefix alone {torch.stack(hits).mean().item():.2f} (best possible ~0.72); "
      f"change of positions 0-2's logits when token 3 changes {leak:.3f}")
