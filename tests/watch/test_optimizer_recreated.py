"""Runtime TP460: an optimizer re-built over parameters already trained."""

from __future__ import annotations

import torch
import torch.nn as nn

from tests.watch.util import codes, watched


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def _epoch(model, opt, steps=3):
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(8, 8)).pow(2).mean().backward()
        opt.step()


def test_optimizer_built_inside_the_epoch_loop_loses_its_state():
    model = _model()
    states = []

    def run():
        for _ in range(3):
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)  # the bug: inside the loop
            _epoch(model, opt)
            states.append(opt.state[model[0].weight]["step"].item())
    [f] = [f for f in watched(run, ["optimizer_recreated"]) if f.code == "TP460"]
    assert states == [3, 3, 3]  # the consequence: Adam restarts its step count every epoch
    assert "same settings" in f.message and f.path.endswith("test_optimizer_recreated.py")


def test_stages_fresh_models_gans_and_stateless_sgd_are_silent():
    model = _model()

    def stages():
        model[0].requires_grad_(False)
        _epoch(model, torch.optim.Adam(model[2].parameters(), lr=1e-3))
        model[0].requires_grad_(True)
        _epoch(model, torch.optim.Adam(model.parameters(), lr=1e-4))  # stage 2: new settings, once
    assert codes(watched(stages, ["optimizer_recreated"])) == []

    def fresh_models():
        for _ in range(3):
            m = _model()
            _epoch(m, torch.optim.Adam(m.parameters(), lr=1e-3))
    assert codes(watched(fresh_models, ["optimizer_recreated"])) == []

    def gan():
        g, d = _model(), _model()
        og, od = torch.optim.Adam(g.parameters()), torch.optim.Adam(d.parameters())
        for _ in range(4):
            _epoch(d, od, 1)
            _epoch(g, og, 1)
    assert codes(watched(gan, ["optimizer_recreated"])) == []

    def plain_sgd():
        for _ in range(3):
            _epoch(model, torch.optim.SGD(model.parameters(), lr=0.1))  # no state to lose
    assert codes(watched(plain_sgd, ["optimizer_recreated"])) == []
