"""DistributedDataParallel training, launched with `torchrun --nproc-per-node 2 ddp_train.py`."""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 1))
    ddp = DDP(model, find_unused_parameters=True)
    model.double()  # converted after wrapping
    data = TensorDataset(torch.randn(512, 8), torch.randn(512, 1))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=32, sampler=sampler)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    for epoch in range(5):
        for x, y in loader:  # sampler.set_epoch(epoch) is never called
            optimizer.zero_grad()
            out = ddp.module(x.double())  # bypasses DDP's gradient all-reduce
            loss = nn.functional.mse_loss(out, y.double())
            loss.backward()
            optimizer.step()
        torch.save(model.state_dict(), "checkpoint.pt")  # every rank writes it
        print(rank, epoch, loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
