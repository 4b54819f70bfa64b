"""huggingface/transformers#33844: M2M100's FlashAttention-2 attention keeps its dropout on in eval mode.

Original: the FlashAttention-2 attention class of M2M100 (and models copied from Bart) passed its
dropout rate to `flash_attn_func` whatever `self.training` was, so `model.eval()` outputs stay
random. Here: a self-attention of our own (one fused q/k/v projection) that calls
`F.scaled_dot_product_attention`, which like `flash_attn_func` applies `dropout_p` in any mode, in a
tiny encoder. `fixed` passes the rate only in training mode, as the fix does.
"""

import sys

import torch
import torch.nn.functional as F
from torch import nn

FIXED = sys.argv[1:] == ["fixed"]
torch.manual_seed(0)


class FusedSelfAttention(nn.Module):
    def __init__(self, width=32, heads=4, attn_dropout=0.1):
        super().__init__()
        self.heads, self.attn_dropout = heads, attn_dropout
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x):
        batch, length, width = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4)
        rate = self.attn_dropout if (self.training or not FIXED) else 0.0  # the bug: on in eval mode too
        mixed = F.scaled_dot_product_attention(q, k, v, dropout_p=rate)
        return self.out(mixed.transpose(1, 2).reshape(batch, length, width))


class TinyEncoder(nn.Module):
    def __init__(self, vocab=100, width=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.attention = FusedSelfAttention(width)
        self.norm = nn.LayerNorm(width)
        self.readout = nn.Linear(width, vocab)

    def forward(self, ids):
        h = self.embed(ids)
        return self.readout(self.norm(h + self.attention(h)))


model = TinyEncoder()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _step in range(10):
    ids = torch.randint(0, 100, (4, 12))
    optimizer.zero_grad()
    loss = F.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
    loss.backward()
    optimizer.step()

model.eval()
ids = torch.randint(0, 100, (2, 12))
with torch.no_grad():
    same = torch.equal(model(ids), model(ids))
print("eval outputs deterministic:", same)
