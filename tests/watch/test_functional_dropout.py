"""Runtime TP458: functional dropout that model.eval() cannot turn off."""

from __future__ import annotations

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


def test_multihead_attention_in_training_skips_the_look_for_its_module():
    """F.multi_head_attention_forward passes dropout_p > 0 only in training, so its calls are not looked at
    (on an unsampled step that look walks the frames); a module of the script that calls sdpa still is."""
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 2, dropout=0.2, batch_first=True)
    attention = Attention()
    x = torch.randn(2, 5, 16)
    with watch(["functional_dropout"], sampler=lambda step: False) as session:
        looked = []
        find = session.innermost_module
        session.innermost_module = lambda: looked.append(1) or find()
        mha(x, x, x, need_weights=False)
        assert looked == []
        attention(x)
        assert looked == [1]
    assert session.findings == []  # both in training
