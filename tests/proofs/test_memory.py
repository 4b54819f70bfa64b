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
    for _ in range(5):
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


@pytest.mark.proves("TP101")
def test_a_total_reset_on_some_iterations_holds_only_the_graphs_since_the_reset():
    # The reset sits at an accumulation boundary (`if (i + 1) % 4 == 0: ... running = 0`), as a
    # `del`, or as a fresh `torch.zeros(())`: each drops the chain, so the graph reachable from the
    # total never spans more than the iterations between two resets.
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)

    def sizes_with(reset):
        sizes, running = [], torch.zeros(())
        for i in range(12):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            running = running + loss
            sizes.append(graph_size(running))
            if (i + 1) % 4 == 0:
                running = reset(running)
        return sizes

    def by_del(running):
        del running
        return torch.zeros(())

    for reset in (lambda r: 0, lambda r: torch.zeros(()), lambda r: r.detach(), by_del):
        sizes = sizes_with(reset)
        assert sizes[0:4] == sizes[4:8] == sizes[8:12], sizes  # the same saw-tooth, never higher
    unbounded = sizes_with(lambda r: r)
    assert unbounded[-1] > unbounded[3] > unbounded[0]
