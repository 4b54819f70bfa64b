"""Proofs for the export rules added with the deprecation survey."""

from __future__ import annotations

import pytest
import torch

from tests.proofs.warned import warned


@pytest.mark.proves("TP755")
def test_torchscript_entry_points_warn_deprecated():
    model = torch.nn.Linear(2, 2)
    for make in (lambda: torch.jit.script(model), lambda: torch.jit.trace(model, torch.randn(1, 2))):
        _, text = warned(make, DeprecationWarning)
        assert "is deprecated. Please switch to `torch.compile` or `torch.export`" in text


@pytest.mark.proves("TP711")
def test_private_register_pytree_node_warns_and_the_public_one_registers_the_same():
    import torch.utils._pytree as pytree

    class Old:
        def __init__(self, v):
            self.v = v

    class New(Old):
        pass

    flatten = lambda p: ([p.v], None)  # noqa: E731
    _, text = warned(lambda: pytree._register_pytree_node(Old, flatten, lambda leaves, ctx: Old(*leaves)),
                     FutureWarning)
    assert "_register_pytree_node` is deprecated" in text
    pytree.register_pytree_node(New, flatten, lambda leaves, ctx: New(*leaves))
    assert pytree.tree_leaves(Old(torch.ones(1)))[0].tolist() == pytree.tree_leaves(New(torch.ones(1)))[0].tolist()
