"""Runtime TP465: BatchNorm momentum above 0.5 (TensorFlow's convention, 1 - torch's).

The variants were written before the watcher was tuned: keyword and positional momentum, momentum set
after construction (`apply(fn)`, a loop over `modules()`), LazyBatchNorm, InstanceNorm with running
statistics, and a hand-written layer calling `F.batch_norm(..., True, 0.99)`; each has a clean twin.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.watch.util import codes, watched

WATCHER = ["batchnorm_momentum"]


def _train(model, shape=(16, 8), steps=4, lr=0.01):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    torch.manual_seed(0)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(*shape) * 3 + 1).pow(2).mean().backward()
        opt.step()
    return opt


def _tp465(findings):
    return [f for f in findings if f.code == "TP465"]


def test_torch_momentum_weights_the_last_batch():
    """The consequence the docs name: with momentum=0.99 the running mean is ~the last batch's mean."""
    bn = nn.BatchNorm1d(1, momentum=0.99)
    for mean in (5.0, -5.0, 2.0):
        bn(torch.full((8, 1), mean) + torch.linspace(-1, 1, 8)[:, None])
    assert abs(bn.running_mean.item() - 2.0) < 0.1  # 0.99 * 2 + 0.01 * (...)
    bn = nn.BatchNorm1d(1, momentum=0.01)  # Keras's 0.99, in torch's convention
    for mean in (5.0, -5.0, 2.0):
        bn(torch.full((8, 1), mean) + torch.linspace(-1, 1, 8)[:, None])
    assert abs(bn.running_mean.item()) < 0.1


def test_keyword_momentum_in_a_cnn_is_a_warning_naming_the_module():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, momentum=0.99), nn.ReLU(), nn.Conv2d(4, 2, 1))
    [f] = _tp465(watched(lambda: _train(model, (4, 3, 8, 8)), WATCHER))
    assert f.severity.value == "warning" and f.subject == "1"
    assert "0.99" in f.message and "0.01" in f.fix


def test_positional_momentum_after_eps():
    model = nn.Sequential(nn.Linear(8, 6), nn.BatchNorm1d(6, 1e-3, 0.9), nn.Linear(6, 1))
    [f] = _tp465(watched(lambda: _train(model), WATCHER))
    assert f.severity.value == "warning" and "0.9" in f.message


def test_momentum_set_after_construction_through_apply_and_a_loop():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(8, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 6))
            self.norm = nn.BatchNorm1d(6)

        def forward(self, x):
            return self.norm(self.body(x))

    def set_tf_momentum(m):
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.momentum = 0.997

    net = Net()
    net.apply(set_tf_momentum)
    found = _tp465(watched(lambda: _train(net), WATCHER))
    assert sorted(f.subject for f in found) == ["body.1", "norm"]

    net = Net()
    for module in net.modules():
        if isinstance(module, nn.BatchNorm1d):
            module.momentum = 0.95
    assert len(_tp465(watched(lambda: _train(net), WATCHER))) == 2


def test_lazy_batchnorm_and_instance_norm_with_running_statistics():
    lazy = nn.Sequential(nn.Linear(8, 6), nn.LazyBatchNorm1d(momentum=0.99))
    assert len(_tp465(watched(lambda: _train(lazy), WATCHER))) == 1
    inorm = nn.Sequential(nn.Conv2d(3, 4, 3), nn.InstanceNorm2d(4, momentum=0.9, track_running_stats=True))
    assert len(_tp465(watched(lambda: _train(inorm, (4, 3, 8, 8)), WATCHER))) == 1


class HandNorm(nn.Module):
    """A hand-written BatchNorm: F.batch_norm with the mode and momentum passed positionally."""

    def __init__(self, n, momentum):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.ones(n)), nn.Parameter(torch.zeros(n))
        self.register_buffer("running_mean", torch.zeros(n))
        self.register_buffer("running_var", torch.ones(n))
        self.m = momentum

    def forward(self, x):
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, self.training, self.m)


def test_functional_batch_norm_with_a_tf_momentum():
    model = nn.Sequential(nn.Linear(8, 6), HandNorm(6, 0.99))
    [f] = _tp465(watched(lambda: _train(model), WATCHER))
    assert f.severity.value == "warning" and f.path.endswith("test_batchnorm_momentum.py")
    model = nn.Sequential(nn.Linear(8, 6), HandNorm(6, 0.1))
    assert _tp465(watched(lambda: _train(model), WATCHER)) == []


def test_between_one_half_and_0_9_is_info():
    model = nn.Sequential(nn.Linear(8, 6), nn.BatchNorm1d(6, momentum=0.7))
    [f] = _tp465(watched(lambda: _train(model), WATCHER))
    assert f.severity.value == "info"


@pytest.mark.parametrize("make", [
    lambda: nn.BatchNorm1d(6),                                    # default 0.1
    lambda: nn.BatchNorm1d(6, momentum=None),                     # cumulative average
    lambda: nn.BatchNorm1d(6, momentum=0.01),                     # Keras's 0.99, converted
    lambda: nn.BatchNorm1d(6, momentum=0.5),                      # the boundary: not above 0.5
    lambda: nn.BatchNorm1d(6, momentum=0.99, track_running_stats=False),  # no running statistics to update
])
def test_clean_twins_are_silent(make):
    model = nn.Sequential(nn.Linear(8, 6), make())
    assert codes(watched(lambda: _train(model), WATCHER)) == []


def test_frozen_batchnorm_in_eval_mode_is_silent():
    model = nn.Sequential(nn.Linear(8, 6), nn.BatchNorm1d(6, momentum=0.99))
    model[1].eval()  # frozen statistics: the momentum is never used
    assert codes(watched(lambda: _train(model), WATCHER)) == []


def test_precise_bn_recompute_without_optimizer_step_is_silent():
    """fvcore-style precise BN: momentum 1.0 for a statistics-only pass under no_grad, no optimizer step."""
    model = nn.Sequential(nn.Linear(8, 6), nn.BatchNorm1d(6))

    def run():
        _train(model)
        bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm1d)]
        saved = [bn.momentum for bn in bns]
        for bn in bns:
            bn.momentum = 1.0
        with torch.no_grad():
            for _ in range(3):
                model(torch.randn(64, 8))
        for bn, m in zip(bns, saved, strict=True):
            bn.momentum = m
        _train(model, steps=2)

    assert codes(watched(run, WATCHER)) == []
