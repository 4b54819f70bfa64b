"""Runtime TP403: modules kept in plain containers run, but nothing trains or saves them."""

from __future__ import annotations

import torch
import torch.nn as nn

from tests.watch.util import codes, watched


class ListHeads(nn.Module):
    def __init__(self, container=list):
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.heads = container([nn.Linear(8, 2) for _ in range(2)])

    def forward(self, x):
        h = torch.relu(self.body(x))
        return self.heads[0](h) + self.heads[1](h)


def _train(model, params=None, steps=3):
    opt = torch.optim.SGD(params if params is not None else model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(4, 8)).pow(2).mean().backward()
        opt.step()


def test_heads_in_a_plain_list_are_reported_and_really_untrained():
    torch.manual_seed(0)
    model = ListHeads()
    before = model.heads[0].weight.clone()
    findings = watched(lambda: _train(model), ["registration"])
    assert torch.equal(model.heads[0].weight, before)  # the consequence: never updated
    assert "heads.0.weight" not in model.state_dict()
    found = [f for f in findings if f.code == "TP403"]
    assert {f.subject for f in found} == {"ListHeads.heads[0]", "ListHeads.heads[1]"}
    assert found[0].path.endswith("test_registration.py") and "nn.ModuleList" in found[0].fix


def test_module_list_and_explicitly_optimized_or_frozen_helpers_are_silent():
    model = ListHeads(nn.ModuleList)
    assert codes(watched(lambda: _train(model), ["registration"])) == []
    hidden = ListHeads()
    params = [*hidden.parameters(), *(p for h in hidden.heads for p in h.parameters())]
    assert codes(watched(lambda: _train(hidden, params), ["registration"])) == []
    frozen = ListHeads()
    for h in frozen.heads:
        h.requires_grad_(False)
    assert codes(watched(lambda: _train(frozen), ["registration"])) == []
