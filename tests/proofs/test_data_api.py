"""Proofs for the data rules: random generators inside a Dataset and DataLoader workers, and the
private collate path, with real DataLoader workers."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset


class OwnGenerators(Dataset):
    def __init__(self):
        self.rng = np.random.default_rng(0)
        self.py = random.Random(0)

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.tensor([self.rng.random(), self.py.random()], dtype=torch.float64)


class GlobalGenerators(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.tensor([np.random.rand(), random.random()], dtype=torch.float64)


def _epoch(ds):
    loader = DataLoader(ds, batch_size=1, num_workers=2, timeout=120)
    return torch.cat(list(loader))


@pytest.mark.proves("TP550")
def test_a_datasets_own_generator_repeats_across_workers_and_epochs():
    torch.manual_seed(0)
    ds = OwnGenerators()
    first, second = _epoch(ds), _epoch(ds)
    # batch_size=1, 2 workers: items 0 and 1 come from different workers, drawn from identical copies
    assert torch.equal(first[0], first[1]) and torch.equal(first[2], first[3])
    assert torch.equal(first, second)  # and the next epoch repeats the first

    # the folklore version of this pitfall is false on torch 2.13: the global generators are seeded
    # per worker and per epoch
    g = GlobalGenerators()
    a, b = _epoch(g), _epoch(g)
    assert len({tuple(r.tolist()) for r in a}) == 4 and not torch.equal(a, b)


@pytest.mark.proves("TP511")
def test_private_default_collate_is_the_public_one():
    from torch.utils.data._utils.collate import default_collate, default_convert

    assert default_collate is torch.utils.data.default_collate
    assert default_convert is torch.utils.data.default_convert
