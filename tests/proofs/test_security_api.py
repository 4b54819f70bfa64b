"""Proofs for the security rules added with the serialization survey."""

from __future__ import annotations

import pickle

import pytest
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)


@pytest.mark.proves("TP960")
def test_a_whole_saved_module_needs_a_full_unpickle_on_torch_2_13(tmp_path):
    whole, state = tmp_path / "whole.pt", tmp_path / "state.pt"
    model = Net()
    torch.save(model, whole)
    torch.save(model.state_dict(), state)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        torch.load(whole)
    assert isinstance(torch.load(whole, weights_only=False), Net)
    fresh = Net()
    fresh.load_state_dict(torch.load(state))
    assert torch.equal(fresh.fc.weight, model.fc.weight)
