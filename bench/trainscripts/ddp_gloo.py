"""Data-parallel training over ``torch.distributed`` (gloo, CPU): launched with one process per rank
(``torchpact run --nproc 2 ddp_gloo.py`` or ``torchrun --nproc-per-node 2 ddp_gloo.py``), each rank
wraps the same model in ``DistributedDataParallel``, reads its own shard through a
``DistributedSampler`` reshuffled every epoch with ``set_epoch``, and only rank 0 writes the
checkpoint; the other ranks wait at a barrier and then load it.

The task is regression of a fixed random two-layer network's output from its input.

    torchpact run --nproc 2 ddp_gloo.py [--epochs 3] [--samples 512] [--batch 32]
"""

import argparse
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def teacher_data(samples: int) -> TensorDataset:
    gen = torch.Generator().manual_seed(0)  # the same data on every rank; the sampler splits it
    teacher = nn.Sequential(nn.Linear(12, 24), nn.Tanh(), nn.Linear(24, 3))
    for p in teacher.parameters():
        p.requires_grad_(False)
        p.copy_(0.5 * torch.randn(p.shape, generator=gen))
    inputs = torch.randn(samples, 12, generator=gen)
    return TensorDataset(inputs, teacher(inputs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(1234)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    student = DistributedDataParallel(nn.Sequential(nn.Linear(12, 48), nn.ReLU(), nn.Linear(48, 3)))
    sgd = torch.optim.SGD(student.parameters(), lr=0.05, momentum=0.9)
    data = teacher_data(args.samples)
    sampler = DistributedSampler(data, shuffle=True, seed=5)
    loader = DataLoader(data, batch_size=args.batch, sampler=sampler)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        student.train()
        for inputs, targets in loader:
            sgd.zero_grad()
            loss = F.mse_loss(student(inputs), targets)
            loss.backward()
            sgd.step()
        total = torch.tensor([loss.item()])
        dist.all_reduce(total)
        if rank == 0:
            print(f"epoch {epoch}: mean last-batch loss over ranks {total.item() / dist.get_world_size():.4f}")

    folder = [tempfile.mkdtemp() if rank == 0 else None]
    dist.broadcast_object_list(folder, src=0)
    path = os.path.join(folder[0], "student.pt")
    if rank == 0:
        torch.save(student.module.state_dict(), path)
    dist.barrier()
    student.module.load_state_dict(torch.load(path))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
