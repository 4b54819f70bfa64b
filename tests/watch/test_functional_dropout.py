"""Runtime TP458: functional dropout that model.eval() cannot turn off."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.watch.util import codes, watched
from torchpact.watch import watch


class Attention(nn.Module):
    """FlashAttention-2 style (transformers#33844): dropout_p passed whatever the mode."""

    def __init__(self, dim=16, dropout=0.3, respect_mode=False):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.dropout = dropout
        self.respect_mode = respect_mode

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        p = self.dropout if (self.training or not self.respect_mode) else 0.0
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p)


class Mlp(nn.Module):
    def __init__(self, respect_mode=False):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.respect_mode = respect_mode

    def forward(self, x):
        if self.respect_mode:
            return F.dropout(self.fc(x), 0.2, training=self.training)
        return F.dropout(self.fc(x), 0.2)  # the bug: training= left at its default (True)


def _train_then_eval(model):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(2, 5, 16)).pow(2).mean().backward()
        opt.step()
    model.eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        return model(x), model(x)


def test_eval_outputs_stay_random_and_both_calls_are_named():
    torch.manual_seed(0)
    model = nn.Sequential(Attention(), Mlp())
    out = {}
    findings = watched(lambda: out.setdefault("pair", _train_then_eval(model)), ["functional_dropout"])
    a, b = out["pair"]
    assert not torch.equal(a, b)  # the consequence: evaluation is random
    found = sorted((f for f in findings if f.code == "TP458"), key=lambda f: f.subject)
    assert [f.subject for f in found] == ["0", "1"]
    assert "scaled_dot_product_attention(dropout_p=0.3)" in found[0].message
    assert "F.dropout(p=0.2) without training=" in found[1].message
    assert all(f.path.endswith("test_functional_dropout.py") for f in found)


def test_mode_aware_calls_and_nn_modules_are_silent():
    torch.manual_seed(0)
    model = nn.Sequential(Attention(respect_mode=True), Mlp(respect_mode=True))
    out = {}
    assert codes(watched(lambda: out.setdefault("pair", _train_then_eval(model)), ["functional_dropout"])) == []
    assert torch.equal(*out["pair"])
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.2, batch_first=True)
    assert codes(watched(lambda: _train_then_eval(layer), ["functional_dropout"])) == []


def test_calls_that_follow_a_module_s_mode_skip_the_walk_for_the_innermost_module():
    """F.multi_head_attention_forward and nn.Dropout pass the module's own mode, so their calls are not looked
    at; a call from a module's forward finds the module in its frame. Only a call from a plain function walks
    the frames for the innermost module (on an unsampled step that walk costs about 35 us)."""
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 2, dropout=0.2, batch_first=True)
    attention = Attention()
    wrapped = Calls(lambda m, h: _helper_dropout(h))
    x = torch.randn(2, 5, 16)
    with watch(["functional_dropout"], sampler=lambda step: False) as session:
        looked = []
        find = session.innermost_module
        session.innermost_module = lambda: looked.append(1) or find()
        mha(x, x, x, need_weights=False)
        mha(x, x, x, need_weights=True)
        nn.Dropout(0.3)(x)
        attention(x)
        assert looked == []
        wrapped(x)
        assert looked == [1]
    assert session.findings == []  # all in training


# ---------------------------------------------------------------------------------------- variants
# Written before the watcher was tuned for them (issue 31). The contract: a dropout call that drops units
# (p > 0 and its `training` argument true) made inside a module whose `training` is False.
class Calls(nn.Module):
    """A module whose forward makes one dropout call, in whatever form the test gives."""

    def __init__(self, call):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.call = call

    def forward(self, x):
        return self.call(self, self.fc(x))


def _helper_dropout(h):  # a helper function, called from forward
    return F.dropout(h, p=0.3)


def _eval_twice(module):
    torch.manual_seed(0)
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        module(torch.randn(4, 16)).pow(2).mean().backward()
        opt.step()
    module.eval()
    x = torch.randn(4, 16)
    with torch.no_grad():
        return module(x), module(x)


DEFAULTED = {  # training= left out: F.dropout and its 1d/2d/3d forms default to training=True
    "positional p": lambda m, h: F.dropout(h, 0.3),
    "keyword p": lambda m, h: F.dropout(h, p=0.3),
    "dropout1d": lambda m, h: F.dropout1d(h[:, None, :], 0.3)[:, 0],
    "dropout2d": lambda m, h: F.dropout2d(h[:, :, None, None], 0.3)[:, :, 0, 0],
    "dropout3d": lambda m, h: F.dropout3d(h[:, :, None, None, None], 0.3)[:, :, 0, 0, 0],
    "in a helper": lambda m, h: _helper_dropout(h),
    "in a loop": lambda m, h: [h := F.dropout(h, 0.1) for _ in range(2)][-1],
}
EXPLICIT = {  # training=True passed on purpose: still random in eval mode
    "positional training": lambda m, h: F.dropout(h, 0.3, True),
    "keyword training": lambda m, h: F.dropout(h, p=0.3, training=True),
    "torch.dropout": lambda m, h: torch.dropout(h, 0.3, True),
    "torch.dropout train=": lambda m, h: torch.dropout(h, p=0.3, train=True),
    "alpha_dropout": lambda m, h: F.alpha_dropout(h, 0.3, True),
    "feature_alpha_dropout": lambda m, h: F.feature_alpha_dropout(h[:, :, None], 0.3, training=True)[:, :, 0],
}
MODE_AWARE = {  # the clean twins: the mode passed on, or a default that is already off
    "positional training": lambda m, h: F.dropout(h, 0.3, m.training),
    "keyword training": lambda m, h: F.dropout(h, p=0.3, training=m.training),
    "dropout2d": lambda m, h: F.dropout2d(h[:, :, None, None], 0.3, m.training)[:, :, 0, 0],
    "torch.dropout": lambda m, h: torch.dropout(h, 0.3, m.training),
    "alpha_dropout default": lambda m, h: F.alpha_dropout(h, 0.3),  # defaults to training=False
    "feature_alpha_dropout default": lambda m, h: F.feature_alpha_dropout(h[:, :, None], 0.3)[:, :, 0],
    "p = 0": lambda m, h: F.dropout(h, 0.0),
}


@pytest.mark.parametrize("form", list(DEFAULTED))
def test_defaulted_training_in_eval_mode_warns_at_the_call(form):
    module = Calls(DEFAULTED[form])
    out = {}
    findings = watched(lambda: out.setdefault("pair", _eval_twice(module)), ["functional_dropout"])
    assert not torch.equal(*out["pair"])  # the consequence: evaluation is random
    [f] = [f for f in findings if f.code == "TP458"]
    assert f.severity.value == "warning" and "without training=" in f.message
    assert f.path.endswith("test_functional_dropout.py")


@pytest.mark.parametrize("form", list(EXPLICIT))
def test_explicit_training_true_in_eval_mode_is_info(form):
    module = Calls(EXPLICIT[form])
    out = {}
    findings = watched(lambda: out.setdefault("pair", _eval_twice(module)), ["functional_dropout"])
    assert not torch.equal(*out["pair"])
    [f] = [f for f in findings if f.code == "TP458"]
    assert f.severity.value == "info" and "=True" in f.message and "Monte-Carlo" in f.fix


@pytest.mark.parametrize("form", list(MODE_AWARE))
def test_mode_aware_twins_are_silent_and_deterministic(form):
    module = Calls(MODE_AWARE[form])
    out = {}
    assert watched(lambda: out.setdefault("pair", _eval_twice(module)), ["functional_dropout"]) == []
    assert torch.equal(*out["pair"])


def test_monte_carlo_dropout_through_dropout_modules_is_silent():
    """model.eval() then the Dropout layers back in train mode: nn.Dropout passes its own (True) mode."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.3), nn.Linear(16, 4))

    def run():
        model.eval()
        for m in model.modules():
            if isinstance(m, nn.Dropout):
                m.train()
        with torch.no_grad():
            return [model(torch.randn(2, 16)) for _ in range(3)]
    assert watched(run, ["functional_dropout"]) == []
