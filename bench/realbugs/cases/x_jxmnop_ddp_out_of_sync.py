"""x.com/jxmnop (2024-04-11): a Hugging Face Trainer run whose model was sometimes the bare module and
sometimes wrapped in DistributedDataParallel, depending on the step, so gradients were only
sometimes all-reduced and the replicas drifted apart.

Here: the same mistake without the Trainer: on even steps the forward goes through the bare module,
on odd steps through a fresh DDP wrapper; a small token encoder of our own learns to predict a
per-sequence target from random tokens (each rank its own data). Run with
`torchpact run --nproc 2`. `fixed` wraps the model once and always uses the wrapper.
"""

import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

FIXED = sys.argv[1:] == ["fixed"]
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
encoder = nn.Sequential(nn.Embedding(100, 32), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
ddp_encoder = DDP(encoder)


def forward_module(step):
    if FIXED:
        return ddp_encoder
    return encoder if step % 2 == 0 else DDP(encoder)  # the bug: DDP only on odd steps


optimizer = torch.optim.AdamW(encoder.parameters(), lr=1e-3)
gen = torch.Generator().manual_seed(100 + rank)
for step in range(10):
    tokens = torch.randint(0, 100, (8, 12), generator=gen)
    target = (tokens.float().mean(dim=1, keepdim=True) - 50) / 30
    prediction = forward_module(step)(tokens).mean(dim=1)
    loss = nn.functional.mse_loss(prediction, target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
dist.destroy_process_group()
