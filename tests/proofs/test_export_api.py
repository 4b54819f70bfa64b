"""Proofs for the export rules added with the deprecation survey."""

from __future__ import annotations

import warnings

import pytest
import torch


@pytest.mark.proves("TP755")
def test_torchscript_entry_points_warn_deprecated():
    model = torch.nn.Linear(2, 2)
    for make in (lambda: torch.jit.script(model), lambda: torch.jit.trace(model, torch.randn(1, 2))):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            make()
        assert any(issubclass(w.category, DeprecationWarning) and "is deprecated. Please switch to `torch.compile`"
                   in str(w.message) for w in caught)


@pytest.mark.proves("TP711")
def test_private_register_pytree_node_warns_and_the_public_one_registers_the_same():
    import torch.utils._pytree as pytree

    class Old:
        def __init__(self, v):
            self.v = v

    class New(Old):
        pass

    flatten = lambda p: ([p.v], None)  # noqa: E731
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pytree._register_pytree_node(Old, flatten, lambda leaves, ctx: Old(*leaves))
    assert any(issubclass(w.category, FutureWarning) and "_register_pytree_node` is deprecated" in str(w.message)
               for w in caught)
    pytree.register_pytree_node(New, flatten, lambda leaves, ctx: New(*leaves))
    assert pytree.tree_leaves(Old(torch.ones(1)))[0].tolist() == pytree.tree_leaves(New(torch.ones(1)))[0].tolist()
