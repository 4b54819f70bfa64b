"""Proofs for the security rules added with the serialization survey."""

from __future__ import annotations

import io
import pickle
import tempfile

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


@pytest.mark.proves("TP960")
def test_a_module_saved_to_a_buffer_and_loaded_back_is_a_copy_unless_the_load_refuses_it():
    # what the rule's in-memory exception relies on, and the loads it still reports
    model = Net()

    def round_trip(make_buffer=io.BytesIO, **load_kwargs):
        with make_buffer() as buf:
            torch.save(model, buf)
            buf.seek(0)
            return torch.load(buf, **load_kwargs)

    for make_buffer in (io.BytesIO, tempfile.TemporaryFile, tempfile.SpooledTemporaryFile):
        copy = round_trip(make_buffer, weights_only=False)
        assert isinstance(copy, Net) and copy is not model
        assert torch.equal(copy.fc.weight, model.fc.weight)
        assert copy.fc.weight.data_ptr() != model.fc.weight.data_ptr()  # a deep copy
    assert isinstance(round_trip(pickle_module=pickle), Net)  # a pickle_module turns the full unpickle on
    with torch.serialization.safe_globals([Net, nn.Linear]):
        assert isinstance(round_trip(), Net)
    for kwargs in ({}, {"weights_only": True}):
        with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
            round_trip(**kwargs)
