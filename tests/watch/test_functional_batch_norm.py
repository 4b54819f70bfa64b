"""Runtime TP464: a hand-written BatchNorm whose F.batch_norm call leaves training= at False."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.watch.util import codes, watched


class MyBatchNorm(nn.Module):
    def __init__(self, n, pass_mode=False):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.ones(n)), nn.Parameter(torch.zeros(n))
        self.register_buffer("running_mean", torch.zeros(n))
        self.register_buffer("running_var", torch.ones(n))
        self.pass_mode = pass_mode

    def forward(self, x):
        if self.pass_mode:
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                training=self.training)
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias)  # the bug


def _train(model, steps=4):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(16, 4) * 5 + 3).pow(2).mean().backward()
        opt.step()


def test_running_statistics_never_update_and_the_call_is_named():
    model = nn.Sequential(nn.Linear(4, 4), MyBatchNorm(4))
    findings = watched(lambda: _train(model), ["functional_batch_norm"])
    assert torch.equal(model[1].running_mean, torch.zeros(4))  # the consequence: never updated
    [f] = [f for f in findings if f.code == "TP464"]
    assert f.subject == "1" and f.path.endswith("test_functional_batch_norm.py")


def test_passing_the_mode_and_nn_batchnorm_are_silent():
    model = nn.Sequential(nn.Linear(4, 4), MyBatchNorm(4, pass_mode=True), nn.BatchNorm1d(4))
    assert codes(watched(lambda: _train(model), ["functional_batch_norm"])) == []
    assert not torch.equal(model[1].running_mean, torch.zeros(4))
