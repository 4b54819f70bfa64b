"""Runtime TP461: clipping before backward() or after step()."""

from __future__ import annotations

import torch
import torch.nn as nn

from tests.watch.util import codes, watched


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def _loop(order, steps=5, scaler=None):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    norms = []
    for _ in range(steps):
        loss = model(torch.randn(8, 8) * 100).pow(2).mean()  # large gradients: clipping matters
        if scaler:
            loss = scaler.scale(loss)
        for op in order:
            if op == "zero":
                opt.zero_grad()
            elif op == "backward":
                loss.backward()
            elif op == "clip":
                if scaler:
                    scaler.unscale_(opt)
                norms.append(float(nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
            elif op == "step":
                if scaler:
                    scaler.step(opt)
                    scaler.update()
                else:
                    opt.step()
    return norms


def test_clip_before_backward_clips_nothing():
    out = {}
    findings = watched(lambda: out.setdefault("n", _loop(["zero", "clip", "backward", "step"])), ["clip_timing"])
    assert out["n"] == [0.0] * 5  # the consequence: nothing to clip, the step uses raw gradients
    [f] = [f for f in findings if f.code == "TP461"]
    assert "none of its 4 parameters had a gradient" in f.message and f.path.endswith("test_clip_timing.py")


def test_clip_after_step_clips_used_gradients():
    [f] = [f for f in watched(lambda: _loop(["zero", "backward", "step", "clip"]), ["clip_timing"])
           if f.code == "TP461"]
    assert "already used at step 0" in f.message


def test_unscale_after_the_scaler_step_leaves_the_next_gradients_scaled():
    # (unscale_ before backward() makes scaler.step raise "No inf checks were recorded": torch catches that one)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
    out = {}
    found = [f for f in watched(lambda: out.setdefault("n", _loop(["zero", "backward", "step", "clip"], scaler=scaler)),
                                ["clip_timing"]) if f.code == "TP461"]
    assert {f.subject for f in found} == {"GradScaler.unscale_", "torch.nn.utils.clip_grad_norm_"}


def test_the_right_orders_are_silent():
    assert codes(watched(lambda: _loop(["zero", "backward", "clip", "step"]), ["clip_timing"])) == []
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
    assert codes(watched(lambda: _loop(["zero", "backward", "clip", "step"], scaler=scaler), ["clip_timing"])) == []
    assert codes(watched(lambda: _loop(["backward", "clip", "step", "zero"]), ["clip_timing"])) == []
