"""microsoft/DeepSpeed#1801: with BF16_Optimizer, gradient clipping under tensor parallelism computed
the clip coefficient from a rank-local norm, so the replicated LayerNorm weights of the TP ranks went
out of sync (BLOOM-176B training).

Here: two gloo ranks hold a replicated model under DDP; each rank clips with the norm of its own
slice of the parameters (as the buggy norm computation did), so the same all-reduced gradient is
scaled differently on each rank and the replicas drift apart. Run with `torchpact run --nproc 2`.
`fixed` clips with the norm over all parameters, the same on every rank.
"""

import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

FIXED = sys.argv[1:] == ["fixed"]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(8, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 1)))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
params = list(model.parameters())
gen = torch.Generator().manual_seed(100 + rank)
for _step in range(20):
    x = torch.randn(16, 8, generator=gen)
    optimizer.zero_grad()
    loss = (model(x) * 10 - x.sum(1, keepdim=True)).pow(2).mean()
    loss.backward()
    if FIXED:
        torch.nn.utils.clip_grad_norm_(params, 0.5)
    else:
        local = params[rank::world]  # the norm of this rank's partition only
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in local]))
        coef = torch.clamp(0.5 / (norm + 1e-6), max=1.0)
        for p in params:
            p.grad.mul_(coef)
    optimizer.step()
dist.destroy_process_group()
