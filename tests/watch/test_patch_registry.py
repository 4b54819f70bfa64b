"""The session owns its patches: a closed session leaves torch's functions as it found them, even when a watcher
was switched off after a bug (it never removes its own patches) or the script crashed."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from torchpact.watch import watch
from torchpact.watch.watcher import Watcher
from torchpact.watch.watchers._patch import Patch, remove_all
from torchpact.watch.watchers.functional_dropout import FunctionalDropout

ORIGINAL_BATCH_NORM = F.batch_norm
ORIGINAL_DROPOUT = F.dropout


class BuggyPatcher(Watcher):
    """Wraps F.batch_norm, then fails at the first step: the session switches it off, so its on_close never runs."""

    name = "buggy_patcher"

    def attach(self, session):
        super().attach(session)
        self.patches = [Patch(F, "batch_norm", lambda original: lambda *a, **k: original(*a, **k))]

    def on_step(self, optimizer):
        raise RuntimeError("a watcher's bug")

    def on_close(self):
        remove_all(self.patches)


class BuggyDropout(FunctionalDropout):
    """The real functional_dropout listener, switched off at the first step (it never unsubscribes)."""

    def on_step(self, optimizer):
        raise RuntimeError("a watcher's bug")


class DropoutAlways(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.bn = nn.Linear(8, 8), nn.BatchNorm1d(8)

    def forward(self, x):
        return F.dropout(self.bn(self.fc(x)), 0.3)  # training= left at its default, True


def _train_then_eval(model, crash=False):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(4, 8)).pow(2).mean().backward()
        opt.step()
    if crash:
        raise ValueError("the script's own error")
    model.eval()
    with torch.no_grad():
        model(torch.randn(4, 8))


def test_a_switched_off_watchers_patches_come_off_at_close():
    with watch([BuggyPatcher(), BuggyDropout()]) as session:
        assert F.batch_norm is not ORIGINAL_BATCH_NORM and F.dropout is not ORIGINAL_DROPOUT
        _train_then_eval(DropoutAlways())
    assert sorted(f.message.split("'")[1] for f in session.findings if f.code == "TP002") == [
        "buggy_patcher", "functional_dropout"]
    assert F.batch_norm is ORIGINAL_BATCH_NORM and F.dropout is ORIGINAL_DROPOUT
    # the next session's dropout watcher hears the calls again (the switched-off listener is gone)
    with watch(["functional_dropout"]) as session:
        _train_then_eval(DropoutAlways())
    assert [f.code for f in session.findings] == ["TP458"]
    assert F.dropout is ORIGINAL_DROPOUT


def test_patches_come_off_when_the_script_crashes():
    with pytest.raises(ValueError):
        with watch(["functional_batch_norm", "batchnorm_momentum", "functional_dropout"]):
            assert F.batch_norm is not ORIGINAL_BATCH_NORM
            _train_then_eval(DropoutAlways(), crash=True)
    assert F.batch_norm is ORIGINAL_BATCH_NORM and F.dropout is ORIGINAL_DROPOUT
