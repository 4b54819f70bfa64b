"""Proofs for memory rules: the pitfall, run with real torch, has the consequence the docs name."""

from __future__ import annotations

import pytest
import torch

from tests.proofs.graph import graph_size


@pytest.mark.proves("TP101")
def test_accumulating_loss_chains_every_iterations_graph():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    sizes = []
    total = 0
    for step in range(1, 6):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        loss.backward()
        total += loss
        sizes.append(graph_size(total))
    assert sizes == sorted(sizes) and sizes[-1] > sizes[0], sizes  # grows with every iteration
    assert type(total.grad_fn).__name__ == "AddBackward0"

    detached = 0
    for _ in range(5):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        loss.backward()
        detached += loss.detach()
    assert detached.grad_fn is None and not detached.requires_grad
