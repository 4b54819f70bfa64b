"""kan-bayashi/ParallelWaveGAN#177 (fixed by #187): distributed training built its DataLoaders on a
shuffling `DistributedSampler` but never called `sampler.set_epoch(epoch)`. The sampler seeds its
shuffle with `seed + epoch`, so without it every epoch visits the samples in the same order on
every rank (pytorch/pytorch#31771 reports the same).

Here: two gloo ranks train a small DDP model for 5 epochs from a shuffling DistributedSampler
without `set_epoch`; each rank records the order of the samples it sees. Run with
`torchpact run --nproc 2`. `fixed` calls `sampler.set_epoch(epoch)` at the start of each epoch.
"""

import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

FIXED = sys.argv[1:] == ["fixed"]
dist.init_process_group("gloo")
torch.manual_seed(0)
features = torch.randn(256, 12)
dataset = TensorDataset(torch.arange(256), features, features @ torch.randn(12, 1))
sampler = DistributedSampler(dataset, shuffle=True)
loader = DataLoader(dataset, batch_size=16, sampler=sampler)
model = DDP(nn.Sequential(nn.Linear(12, 32), nn.Tanh(), nn.Linear(32, 1)))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

orders = []
for epoch in range(5):
    if FIXED:
        sampler.set_epoch(epoch)
    seen = []
    for index, x, y in loader:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        seen += index.tolist()
    orders.append(seen)

repeats = sum(order == orders[0] for order in orders[1:])
if dist.get_rank() == 0:
    print(f"epochs 2-5 that repeat epoch 1's sample order on rank 0: {repeats}/4; final loss {loss.item():.4f}")
dist.destroy_process_group()
