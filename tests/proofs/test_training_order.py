"""Proofs for training rules about what runs where in the loop: clipping before backward(), an
optimizer or an initialiser inside the loop that trains. Real training loops, real torch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn


def _data(n: int = 3, scale: float = 100.0):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(8, 4, generator=g) * scale, torch.randn(8, 1, generator=g)) for _ in range(n)]


def _train(order: list[str], *, scaler: bool = False, set_to_none: bool = True, scale: float = 100.0):
    """Three SGD steps of a linear model, running ``order`` each iteration; the weights and the norms
    ``clip_grad_norm_`` returned."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    amp = torch.amp.GradScaler("cpu", init_scale=1024.0) if scaler else None
    norms = []
    for x, y in _data(scale=scale):
        opt.zero_grad(set_to_none=set_to_none)
        loss = F.mse_loss(model(x), y)
        scaled = amp.scale(loss) if amp else loss
        for op in order:
            if op == "clip_norm":
                norms.append(float(nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
            elif op == "clip_value":
                nn.utils.clip_grad_value_(model.parameters(), 0.01)
            elif op == "unscale":
                amp.unscale_(opt)
            elif op == "backward":
                scaled.backward()
            elif op == "step":
                if amp:
                    amp.step(opt)
                    amp.update()
                else:
                    opt.step()
    return model.weight.detach().clone(), norms


@pytest.mark.proves("TP461")
def test_clipping_before_backward_does_nothing_and_the_step_is_unclipped():
    unclipped, _ = _train(["backward", "step"])
    clipped, real_norms = _train(["backward", "clip_norm", "step"])
    assert min(real_norms) > 1000  # the gradients clipping was meant to contain
    assert not torch.equal(clipped, unclipped)
    for set_to_none in (True, False):
        early, seen = _train(["clip_norm", "backward", "step"], set_to_none=set_to_none)
        assert seen == [0.0, 0.0, 0.0]  # no gradients (None, or zeros) when it runs
        assert torch.equal(early, _train(["backward", "step"], set_to_none=set_to_none)[0])  # bit for bit


@pytest.mark.proves("TP461")
def test_clip_grad_value_before_the_first_backward_raises():
    with pytest.raises(RuntimeError, match="nested_tensorlist"):
        _train(["clip_value", "backward", "step"])


@pytest.mark.proves("TP461")
def test_unscale_before_backward_raises_or_steps_with_scaled_gradients():
    reference, _ = _train(["backward", "unscale", "step"], scaler=True, scale=1.0)
    assert torch.allclose(reference, _train(["backward", "step"], scale=1.0)[0], atol=1e-6)  # unscaled: a plain step
    # before any scale() of the scaler: a loud error
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    amp = torch.amp.GradScaler("cpu", init_scale=1024.0)
    with pytest.raises(AssertionError, match="Attempted unscale_ but _scale is None"):
        amp.unscale_(opt)
    # after scale(), before backward(): nothing to unscale; with no gradients at all the step refuses
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    amp = torch.amp.GradScaler("cpu", init_scale=1024.0)
    x, y = _data(1, scale=1.0)[0]
    scaled = amp.scale(F.mse_loss(model(x), y))
    amp.unscale_(opt)
    scaled.backward()
    with pytest.raises(AssertionError, match="No inf checks were recorded for this optimizer"):
        amp.step(opt)
    # with zeroed gradients (zero_grad(set_to_none=False)) it unscales the zeros, marks the optimizer
    # unscaled, and the step applies the new gradients still multiplied by the scale: silently
    opt.zero_grad(set_to_none=False)
    amp.update(1024.0)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    before = model.weight.detach().clone()
    scaled = amp.scale(F.mse_loss(model(x), y))
    amp.unscale_(opt)
    scaled.backward()
    grad = model.weight.grad.clone()
    amp.step(opt)
    assert torch.allclose(model.weight.detach(), before - 1e-6 * grad)  # the update used that gradient
    plain = nn.Linear(4, 1)
    plain.load_state_dict(state)
    F.mse_loss(plain(x), y).backward()
    assert torch.allclose(grad, 1024.0 * plain.weight.grad, rtol=1e-4)  # 1024 times the real gradient


def _init_weights(m: nn.Module) -> None:
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight)
        nn.init.zeros_(m.bias)


def _epochs(reinit: str, epochs: int = 4) -> list[float]:
    """The loss at the end of each epoch of an Adam-trained linear regression, with the weights
    re-initialised never, at each epoch's start, or before each step."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    w_true = torch.randn(4, 1, generator=g)
    batches = [(x, x @ w_true) for x in (torch.randn(16, 4, generator=g) for _ in range(10))]
    model = nn.Sequential(nn.Linear(4, 1))
    model.apply(_init_weights)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    ends = []
    for _ in range(epochs):
        if reinit == "epoch":
            torch.manual_seed(0)  # the same random start each time, to compare like with like
            model.apply(_init_weights)
        for x, y in batches:
            if reinit == "step":
                torch.manual_seed(0)
                model.apply(_init_weights)
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
        ends.append(F.mse_loss(model(torch.cat([b[0] for b in batches])), torch.cat([b[1] for b in batches])).item())
    return ends


@pytest.mark.proves("TP456")
def test_weights_reinitialised_in_the_loop_undo_the_training():
    kept = _epochs("never")
    assert kept[-1] < 0.5 * kept[0]  # keeps improving epoch after epoch
    per_epoch = _epochs("epoch")
    assert per_epoch[-1] > 10 * kept[-1]  # every epoch restarts from random weights
    assert max(per_epoch[1:]) > 0.3 * per_epoch[0]  # and gets no further than about one epoch does
    per_step = _epochs("step")
    assert min(per_step) > per_epoch[0]  # never past one step of training


@pytest.mark.proves("TP460")
def test_optimizer_recreated_each_epoch_restarts_its_state_at_each_epoch():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(5)]
    counts = []
    for _ in range(3):
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for x, y in data:
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
        counts.append(opt.state[model.weight]["step"].item())
    assert counts == [5, 5, 5]  # Adam's step count (and its moments) start again every epoch
