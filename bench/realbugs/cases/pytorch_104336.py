"""pytorch#104336: a DDP model moved to the CPU and back stops synchronising its gradients.

Original: `ddp_model.cpu(); ddp_model.cuda(rank)` after wrapping; the parameters get new data, the
autograd hooks DDP registered no longer fire, and each GPU trains its own replica. On CPU (gloo) the
same happens with a dtype round trip, which also replaces every parameter's data. Run with
`torchpact run --nproc 2`. `fixed` converts the model before wrapping it.
"""

import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

FIXED = sys.argv[1:] == ["fixed"]
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
if FIXED:
    model.double().float()
ddp_model = DDP(model)
if not FIXED:
    ddp_model.double()   # stands for ddp_model.cpu()
    ddp_model.float()    # stands for ddp_model.cuda(rank)
optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.05)
gen = torch.Generator().manual_seed(100 + rank)  # each rank its own shard of the data
for _step in range(20):
    x = torch.randn(16, 8, generator=gen)
    optimizer.zero_grad()
    loss = (ddp_model(x) - x.sum(1, keepdim=True)).pow(2).mean()
    loss.backward()
    optimizer.step()
dist.destroy_process_group()
