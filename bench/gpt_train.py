"""A small GPT-style model trained on CPU; the workload of bench/run_overhead.py.

Prints one line: `train_seconds <float>` for the training loop alone (imports and model set-up
excluded). TP_BENCH_MODE selects an alternative instrumentation to compare with:
`anomaly` (torch.autograd.set_detect_anomaly(True)) or `naive` (a global forward hook that checks
every module output with isfinite and syncs to the host each time).
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS = int(os.environ.get("TP_BENCH_STEPS", "120"))
torch.manual_seed(0)
torch.set_num_threads(int(os.environ.get("TP_BENCH_THREADS", "1")))


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, dropout=0.1, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.Dropout(0.1))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab=512, d=128, heads=4, layers=4, ctx=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
        x = self.tok(idx) + self.pos(torch.arange(t))
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln(x))


def main() -> None:
    mode = os.environ.get("TP_BENCH_MODE", "")
    if mode == "anomaly":
        torch.autograd.set_detect_anomaly(True)
    elif mode == "naive":
        def check(module, args, output):
            if isinstance(output, torch.Tensor) and not torch.isfinite(output).all().item():
                print("non-finite in", type(module).__name__)
        torch.nn.modules.module.register_module_forward_hook(check)
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    # learnable tokens (arithmetic sequences mod 512: the next token follows from the two before), so that the
    # workload is a run that trains: random tokens are a run that cannot learn, which TP568 rightly probes
    starts, strides = torch.randint(0, 512, (STEPS, 16, 1)), torch.randint(1, 9, (STEPS, 16, 1))
    data = (starts + strides * torch.arange(65)) % 512
    start = time.perf_counter()
    for step in range(STEPS):
        batch = data[step]
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    print(f"train_seconds {time.perf_counter() - start:.4f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
