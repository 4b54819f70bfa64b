"""Proofs for the export rules added with the deprecation survey."""

from __future__ import annotations

import warnings

import pytest
import torch


@pytest.mark.proves("TP710")
def test_torchscript_entry_points_warn_deprecated():
    model = torch.nn.Linear(2, 2)
    for make in (lambda: torch.jit.script(model), lambda: torch.jit.trace(model, torch.randn(1, 2))):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            make()
        assert any(issubclass(w.category, DeprecationWarning) and "is deprecated. Please switch to `torch.compile`"
                   in str(w.message) for w in caught)
