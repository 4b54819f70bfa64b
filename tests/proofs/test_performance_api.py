"""Proofs for the performance rules added with the TorchFix parity work."""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from tests.proofs.warned import warned


class Pids(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.tensor([os.getpid()])


@pytest.mark.proves("TP920")
def test_dataloader_without_workers_loads_in_the_training_process():
    main = os.getpid()
    assert {int(p) for p in torch.cat(list(DataLoader(Pids(), batch_size=1)))} == {main}
    with_workers = {int(p) for p in torch.cat(list(DataLoader(Pids(), batch_size=1, num_workers=2, timeout=120)))}
    assert main not in with_workers and len(with_workers) == 2


@pytest.mark.proves("TP920")
def test_a_tensor_dataset_fetches_views_of_tensors_already_in_memory():
    # Nothing to read or decode: every item (also through Subset / random_split / ConcatDataset) is a
    # view into the tensors the dataset holds, so workers have no I/O to overlap.
    from torch.utils.data import ConcatDataset, Subset, TensorDataset, random_split

    features, targets = torch.randn(20, 3), torch.arange(20)
    full = TensorDataset(features, targets)
    part, _ = random_split(full, [0.5, 0.5])
    for ds in (full, part, Subset(full, range(4)), ConcatDataset([full, full])):
        x, y = ds[2]
        assert x.untyped_storage().data_ptr() == features.untyped_storage().data_ptr()
        assert y.untyped_storage().data_ptr() == targets.untyped_storage().data_ptr()


class _Reporting(IterableDataset):
    """Yields items and reports into a dict its caller handed over (a metrics sink)."""

    def __init__(self, sink):
        self.sink = sink

    def __iter__(self):
        for i in range(4):
            self.sink.setdefault("served", []).append(i)
            yield torch.tensor([i])


@pytest.mark.proves("TP920")
def test_a_worker_iterates_a_copy_whose_writes_never_reach_the_caller():
    # Why TP920 leaves alone a dataset that writes into its caller's object: with workers the
    # writes land in the worker process's copy, so such a dataset needs num_workers=0.
    main_sink: dict = {}
    assert len(list(DataLoader(_Reporting(main_sink), batch_size=None))) == 4
    assert main_sink == {"served": [0, 1, 2, 3]}
    worker_sink: dict = {}
    assert len(list(DataLoader(_Reporting(worker_sink), batch_size=None, num_workers=1, timeout=120))) == 4
    assert worker_sink == {}


@pytest.mark.proves("TP921")
def test_sdp_kernel_warns():
    def enter():
        with torch.backends.cuda.sdp_kernel(enable_math=True):
            pass

    _, text = warned(enter, FutureWarning)
    assert "sdp_kernel()` is deprecated" in text
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(1, 2, 4, 8)
    with sdpa_kernel([SDPBackend.MATH]):
        out = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert out.shape == q.shape
