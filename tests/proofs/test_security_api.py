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


@pytest.mark.proves("TP951")
def test_weights_only_loads_state_dicts_but_not_a_package_holding_a_class():
    # the line TP951's "only weights are used" draws: what load_state_dict takes loads with
    # weights_only=True; a package whose reader builds pkg["klass"] needs the full unpickle
    model = Net()
    opt = torch.optim.Adam(model.parameters())
    model.fc(torch.ones(1, 3)).sum().backward()
    opt.step()
    for obj in (model.state_dict(), opt.state_dict(), {"model": model.state_dict(), "epoch": 3, "name": "run"}):
        buf = io.BytesIO()
        torch.save(obj, buf)
        buf.seek(0)
        assert torch.load(buf, weights_only=True).keys() == obj.keys()
    package = {"klass": Net, "args": (), "kwargs": {}, "state": model.state_dict()}
    buf = io.BytesIO()
    torch.save(package, buf)
    buf.seek(0)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        torch.load(buf, weights_only=True)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    rebuilt = loaded["klass"](*loaded["args"], **loaded["kwargs"])
    rebuilt.load_state_dict(loaded["state"])
    assert torch.equal(rebuilt.fc.weight, model.fc.weight)
