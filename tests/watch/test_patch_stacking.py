"""Several patches on one torch function: each wrapped function learns the same caller, however they stack."""

from __future__ import annotations

import sys
import types

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.watch.util import watched
from torchpact.watch.watchers._patch import Patch, caller_frame, remove_all


def _recording(seen: list, name: str):
    def make(original):
        def wrapped(*args, **kwargs):
            seen.append((name, _via_helper()))
            return original(*args, **kwargs)
        return wrapped
    return make


def _via_helper():
    return caller_frame()  # asked from a helper of the wrapped function, not from it


def test_every_stacked_patch_sees_the_frame_that_called_the_attribute():
    owner = types.SimpleNamespace(double=lambda x: 2 * x)
    original = owner.double
    seen: list = []
    patches = [Patch(owner, "double", _recording(seen, "first")), Patch(owner, "double", _recording(seen, "second"))]
    here = sys._getframe()
    assert owner.double(3) == 6
    remove_all(patches)
    assert [name for name, _ in seen] == ["second", "first"]
    assert all(frame is here for _, frame in seen)
    assert owner.double is original


def test_a_patch_called_from_inside_another_patched_call_sees_its_own_caller():
    owner = types.SimpleNamespace(outer=None, inner=lambda x: x + 1)

    def outer(x):  # the caller of `inner` is this function, not the caller of `outer`
        return owner.inner(x)

    owner.outer = outer
    seen: list = []
    patches = [Patch(owner, "outer", _recording(seen, "outer")), Patch(owner, "inner", _recording(seen, "inner"))]
    try:
        assert owner.outer(1) == 2
    finally:
        remove_all(patches)
    frames = dict(seen)
    assert frames["outer"] is not None and frames["outer"].f_code is sys._getframe().f_code
    assert frames["inner"].f_code is outer.__code__


class HandBatchNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.ones(n)), nn.Parameter(torch.zeros(n))
        self.register_buffer("running_mean", torch.zeros(n))
        self.register_buffer("running_var", torch.ones(n))

    def forward(self, x):
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias)  # training= left out


_BUG_LINE = HandBatchNorm.forward.__code__.co_firstlineno + 1


def _train(model):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(8, 4) + 1).pow(2).mean().backward()
        opt.step()


@pytest.mark.parametrize("order", [("functional_batch_norm", "batchnorm_momentum"),
                                   ("batchnorm_momentum", "functional_batch_norm")])
@pytest.mark.parametrize("foreign", ["none", "beneath", "above"])
def test_batch_norm_watchers_stacked_on_f_batch_norm_name_the_users_line(order, foreign):
    # two watchers patch F.batch_norm; a third, foreign patch goes beneath them (made before the session)
    # or above them (made inside it, so its wrapper is the one the script's call reaches first)
    extra = [Patch(F, "batch_norm", _recording([], "foreign"))] if foreign == "beneath" else []

    def run():
        if foreign == "above":
            extra.append(Patch(F, "batch_norm", _recording([], "foreign")))
        _train(nn.Sequential(nn.Linear(4, 4), HandBatchNorm(4)))

    try:
        findings = watched(run, list(order))
    finally:
        remove_all(extra)
    [f] = [f for f in findings if f.code == "TP464"]
    assert (f.path, f.line) == (__file__, _BUG_LINE)
    assert F.batch_norm is torch.nn.functional.batch_norm and not hasattr(F.batch_norm, "_torchdynamo_inline")


class DropoutAlways(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return F.dropout(self.fc(x), 0.3)  # training= left at its default, True


_DROPOUT_LINE = DropoutAlways.forward.__code__.co_firstlineno + 1


def test_functional_dropout_names_the_users_line_under_a_second_patch():
    def run():
        model = DropoutAlways()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(2):
            opt.zero_grad()
            model(torch.randn(4, 8)).pow(2).mean().backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            model(torch.randn(4, 8))

    extra: list = []

    def run_under_a_foreign_patch():
        extra.append(Patch(F, "dropout", _recording([], "foreign")))  # above the watcher's: reached first
        run()

    try:
        findings = watched(run_under_a_foreign_patch, ["functional_dropout"])
    finally:
        remove_all(extra)
    [f] = [f for f in findings if f.code == "TP458"]
    assert (f.path, f.line) == (__file__, _DROPOUT_LINE)
