"""Runtime TP459: the output layer is frozen at its random initialisation."""

from __future__ import annotations

import torch
import torch.nn as nn

from tests.watch.util import codes, watched
from torchpact.watch.watchers.frozen_output import _default_init


def _cnn(classes=10):
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, classes))


def _train(model, steps=6):
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    x, y = torch.randn(16, 3, 8, 8), torch.randint(0, 10, (16,))
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_new_head_frozen_with_the_backbone_while_batchnorm_trains():
    model = _cnn()
    model[5] = nn.Linear(8, 10)  # a new head for the new task...
    for name, p in model.named_parameters():
        if name != "1.weight" and name != "1.bias":  # ...then everything but BatchNorm frozen (forum #84911)
            p.requires_grad = False
    head = model[5].weight.clone()
    findings = watched(lambda: _train(model), ["frozen_output"])
    assert torch.equal(head, model[5].weight)
    [f] = [f for f in findings if f.code == "TP459"]
    assert f.subject == "5" and "random initial values" in f.message and "16 other parameters" in f.message


def test_trainable_head_and_frozen_pretrained_head_are_silent():
    model = _cnn()
    for p in model[:2].parameters():
        p.requires_grad = False  # linear probing: frozen backbone, trainable head
    assert codes(watched(lambda: _train(model), ["frozen_output"])) == []
    pretrained = _cnn()
    _train(pretrained, steps=30)  # the head leaves its init range
    assert not _default_init(pretrained[5])
    pretrained[5].requires_grad_(False)
    pretrained[0].requires_grad_(False)  # test-time BatchNorm adaptation: only BN trains
    assert codes(watched(lambda: _train(pretrained), ["frozen_output"])) == []
