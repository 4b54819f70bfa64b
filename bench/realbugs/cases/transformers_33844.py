"""huggingface/transformers#33844: M2M100FlashAttention2 keeps attention dropout on in eval mode.

Original: the FlashAttention-2 attention of M2M100 (and models copied from Bart) passed
`dropout=self.dropout` to `flash_attn_func` whatever `self.training` was, so `model.eval()` outputs
stay random. Here: the same attention through `F.scaled_dot_product_attention` (FlashAttention's CPU
stand-in, which applies `dropout_p` in any mode) in a tiny encoder. `fixed` passes
`self.dropout if self.training else 0.0`, as the fix does.
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = sys.argv[1:] == ["fixed"]
torch.manual_seed(0)


class M2M100FlashAttention2(nn.Module):
    def __init__(self, embed_dim=32, num_heads=4, dropout=0.1):
        super().__init__()
        self.num_heads, self.dropout = num_heads, dropout
        self.q_proj, self.k_proj = nn.Linear(embed_dim, embed_dim), nn.Linear(embed_dim, embed_dim)
        self.v_proj, self.out_proj = nn.Linear(embed_dim, embed_dim), nn.Linear(embed_dim, embed_dim)

    def forward(self, hidden):
        b, t, d = hidden.shape
        split = lambda x: x.view(b, t, self.num_heads, d // self.num_heads).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q_proj(hidden)), split(self.k_proj(hidden)), split(self.v_proj(hidden))
        dropout_rate = (self.dropout if self.training else 0.0) if FIXED else self.dropout
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_rate)
        return self.out_proj(out.transpose(1, 2).reshape(b, t, d))


class Encoder(nn.Module):
    def __init__(self, vocab=100, dim=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.attn = M2M100FlashAttention2(dim)
        self.norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab)

    def forward(self, ids):
        h = self.embed(ids)
        return self.lm_head(self.norm(h + self.attn(h)))


model = Encoder()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(10):
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
