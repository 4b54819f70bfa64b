"""Proofs for data rules: the pitfall, run with real torch, has the consequence the docs name."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, RandomSampler, SequentialSampler


@pytest.mark.proves("TP501")
def test_distributed_sampler_replays_the_same_order_without_set_epoch():
    dataset = torch.arange(64)
    for rank in (0, 1):
        sampler = DistributedSampler(dataset, num_replicas=2, rank=rank)  # shuffle=True by default
        assert sampler.shuffle
        loader = DataLoader(dataset, batch_size=8, sampler=sampler)
        epochs = [torch.cat(list(loader)).tolist() for _ in range(4)]
        assert all(order == epochs[0] for order in epochs), "same permutation every epoch"
        assert epochs[0] != sorted(epochs[0])  # it is shuffled, just never re-shuffled

        # A loader re-built inside the epoch loop starts from epoch 0 again: same order too.
        rebuilt = [list(DistributedSampler(dataset, num_replicas=2, rank=rank)) for _ in range(3)]
        assert all(order == list(sampler) for order in rebuilt)

        reshuffled = []
        for epoch in range(4):
            loader.sampler.set_epoch(epoch)
            reshuffled.append(torch.cat(list(loader)).tolist())
        assert len({tuple(order) for order in reshuffled}) == 4, "set_epoch gives a new order each epoch"

    # With set_epoch the ranks still split each epoch's permutation: every sample once per epoch.
    for epoch in range(3):
        shards = [DistributedSampler(dataset, num_replicas=2, rank=rank) for rank in (0, 1)]
        for shard in shards:
            shard.set_epoch(epoch)
        assert sorted(list(shards[0]) + list(shards[1])) == list(range(64))


@pytest.mark.proves("TP502")
def test_dataloader_rejects_shuffle_with_a_sampler():
    dataset = list(range(16))
    with pytest.raises(ValueError, match="^sampler option is mutually exclusive with shuffle$"):
        DataLoader(dataset, batch_size=4, shuffle=True, sampler=DistributedSampler(dataset, num_replicas=2, rank=0))
    with pytest.raises(ValueError, match="^sampler option is mutually exclusive with shuffle$"):
        DataLoader(dataset, 4, True, SequentialSampler(dataset))  # positional

    batch_sampler = BatchSampler(RandomSampler(dataset), batch_size=4, drop_last=False)
    message = "^batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last$"
    for conflicting in ({"shuffle": True}, {"batch_size": 4}, {"batch_size": None}, {"drop_last": True},
                        {"sampler": SequentialSampler(dataset)}):
        with pytest.raises(ValueError, match=message):
            DataLoader(dataset, batch_sampler=batch_sampler, **conflicting)

    # The near-misses the rule leaves alone really are fine.
    DataLoader(dataset, shuffle=True, sampler=None)
    DataLoader(dataset, shuffle=False, sampler=SequentialSampler(dataset))
    DataLoader(dataset, batch_sampler=batch_sampler, batch_size=1, shuffle=False, drop_last=False)
