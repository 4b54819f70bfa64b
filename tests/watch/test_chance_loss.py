"""Runtime TP462: a cross-entropy loss that stays at ln(C)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from tests.watch.util import codes, watched
from torchpact.watch.watchers.chance_loss import CHECK_AT


def _train(shuffled_labels: bool, steps=CHECK_AT):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    criterion = nn.CrossEntropyLoss()
    losses = []
    for _ in range(steps):
        x = torch.randn(64, 10)
        y = torch.randint(0, 10, (64,)) if shuffled_labels else x.argmax(1)
        opt.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_labels_unrelated_to_inputs_keep_the_loss_at_ln_c():
    out = {}
    findings = watched(lambda: out.setdefault("l", _train(shuffled_labels=True)), ["chance_loss"])
    assert abs(sum(out["l"][-20:]) / 20 - math.log(10)) < 0.05  # the consequence: nothing learned
    [f] = [f for f in findings if f.code == "TP462"]
    assert f.severity.value == "info" and "ln(10) = 2.303" in f.message


def test_a_learning_model_is_silent():
    assert codes(watched(lambda: _train(shuffled_labels=False), ["chance_loss"])) == []
