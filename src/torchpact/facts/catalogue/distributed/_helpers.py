"""Small pieces the distributed experiments share (run inside the rank processes)."""

from __future__ import annotations


def net():
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def rank_batch(rank: int, step: int, dtype=None):
    """A batch that differs between ranks and steps, the same on every run."""
    import torch

    generator = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(8, 4, generator=generator)
    return x if dtype is None else x.to(dtype)


def same_on_all_ranks(tensor) -> bool:
    import torch
    import torch.distributed as dist

    local = tensor.detach().double().contiguous()
    gathered = [torch.zeros_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, local)
    return all(torch.equal(gathered[0], g) for g in gathered[1:])


def in_sync(tensors) -> bool:
    return all([same_on_all_ranks(t) for t in tensors])  # a list: every rank runs every collective


def all_reduces_per_step(ddp, rank: int, steps: int = 3, dtype=None) -> float:
    """``gloo:all_reduce`` calls per forward + backward through ``ddp``, counted by the profiler."""
    import collections

    from torch.profiler import ProfilerActivity, profile

    for step in range(2):  # warm up: DDP rebuilds its buckets after the first iteration
        ddp(rank_batch(rank, step, dtype)).sum().backward()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for step in range(steps):
            ddp(rank_batch(rank, step, dtype)).sum().backward()
    return collections.Counter(e.name for e in prof.events())["gloo:all_reduce"] / steps
