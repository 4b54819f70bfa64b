"""Runtime TP457: a train() override that freezes stages never ran before training."""

from __future__ import annotations

import torch
import torch.nn as nn

from tests.watch.util import codes, watched


class Backbone(nn.Module):
    """mmpretrain-style: `frozen_stages` is applied in train(), not in __init__."""

    def __init__(self, frozen_stages=1):
        super().__init__()
        self.frozen_stages = frozen_stages
        self.stages = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
        self.head = nn.Linear(8, 3)

    def _freeze_stages(self):
        for stage in self.stages[: self.frozen_stages]:
            stage.eval()
            for p in stage.parameters():
                p.requires_grad = False

    def train(self, mode=True):
        super().train(mode)
        self._freeze_stages()
        return self

    def forward(self, x):
        for stage in self.stages:
            x = torch.relu(stage(x))
        return self.head(x)


class FrozenInInit(Backbone):
    def __init__(self):
        super().__init__()
        self._freeze_stages()


def _train(model, call_train: bool, steps=4):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    if call_train:
        model.train()
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(torch.randn(8, 8)), torch.randint(0, 3, (8,))).backward()
        opt.step()


def test_frozen_stages_never_frozen_because_train_never_ran():
    torch.manual_seed(0)
    model = Backbone()
    frozen_before = model.stages[0].weight.clone()
    findings = watched(lambda: _train(model, call_train=False), ["train_override"])
    assert not torch.equal(frozen_before, model.stages[0].weight)  # the consequence: the "frozen" stage trained
    [f] = [f for f in findings if f.code == "TP457"]
    assert "`Backbone`" in f.message and "test_train_override.py:" in f.message and "model.train()" in f.fix


def test_train_called_or_setup_in_init_is_silent():
    torch.manual_seed(0)
    model = Backbone()
    frozen_before = model.stages[0].weight.clone()
    assert codes(watched(lambda: _train(model, call_train=True), ["train_override"])) == []
    assert torch.equal(frozen_before, model.stages[0].weight)
    assert codes(watched(lambda: _train(FrozenInInit(), call_train=False), ["train_override"])) == []
    wrapped = nn.Sequential(Backbone(), nn.ReLU())  # a parent's train() reaches the override
    assert codes(watched(lambda: _train(wrapped, call_train=True), ["train_override"])) == []
    plain = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.1), nn.Linear(8, 3))
    assert codes(watched(lambda: _train(plain, call_train=False), ["train_override"])) == []
