"""Proofs for numerics rules: the pitfall, run with real torch, has the consequence the docs name."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn


@pytest.mark.proves("TP301")
def test_cross_entropy_on_softmax_output_has_a_floor_and_vanishing_gradients():
    target = torch.tensor([0])
    # a perfect prediction: the loss on probabilities cannot go below log(1 + (C-1)/e)
    perfect = torch.tensor([[1.0, 0.0, 0.0]])
    assert F.cross_entropy(perfect, target).item() == pytest.approx(math.log(1 + 2 / math.e), rel=1e-5)
    assert F.cross_entropy(torch.tensor([[50.0, 0.0, 0.0]]), target).item() < 1e-6  # logits: ~0

    # a confidently wrong prediction: almost no gradient through the softmax
    logits = torch.tensor([[0.0, 10.0, 0.0]], requires_grad=True)
    nn.CrossEntropyLoss()(torch.softmax(logits, dim=1), target).backward()
    through_softmax = logits.grad.abs().max().item()
    logits.grad = None
    nn.CrossEntropyLoss()(logits, target).backward()
    on_logits = logits.grad.abs().max().item()
    assert through_softmax < 1e-4 and on_logits > 0.99, (through_softmax, on_logits)


@pytest.mark.proves("TP302")
def test_log_of_softmax_is_minus_inf_and_nan_grad_where_log_softmax_is_finite():
    x = torch.tensor([0.0, 200.0], requires_grad=True)
    two_step = torch.log(torch.softmax(x, 0))
    assert two_step[0].item() == -math.inf
    assert torch.equal(x.detach().softmax(-1).log(), two_step.detach())
    two_step.sum().backward()
    assert torch.isnan(x.grad).all()

    x.grad = None
    fused = torch.log_softmax(x, 0)
    assert fused.tolist() == [-200.0, 0.0]
    fused.sum().backward()
    assert torch.isfinite(x.grad).all()

    # in float16 a gap of 18 is already enough
    h = torch.tensor([0.0, 18.0], dtype=torch.float16)
    assert torch.log(torch.softmax(h, 0))[0].item() == -math.inf
    assert torch.isfinite(torch.log_softmax(h, 0)).all()

    # where the two-step version is finite, log_softmax agrees (the autofix is exact there)
    y = torch.randn(4, 7)
    assert torch.allclose(torch.log(F.softmax(y, dim=1)), F.log_softmax(y, dim=1), atol=1e-6)


@pytest.mark.proves("TP303")
def test_bce_on_saturated_sigmoid_clamps_the_loss_and_zeroes_the_gradient():
    z = torch.tensor([20.0], requires_grad=True)
    target = torch.tensor([0.0])
    assert torch.sigmoid(torch.tensor(17.0)).item() == 1.0
    loss = nn.BCELoss()(torch.sigmoid(z), target)
    loss.backward()
    assert loss.item() == 100.0 and z.grad.item() == 0.0

    z.grad = None
    stable = nn.BCEWithLogitsLoss()(z, target)
    stable.backward()
    assert stable.item() == pytest.approx(20.0) and z.grad.item() == pytest.approx(1.0)

    # negative side: the loss is right but the gradient vanishes
    z = torch.tensor([-40.0], requires_grad=True)
    F.binary_cross_entropy(torch.sigmoid(z), torch.tensor([1.0])).backward()
    assert abs(z.grad.item()) < 1e-5

    # unsaturated: the logits version (the autofix) gives the same loss
    w = torch.randn(16)
    t = torch.randint(0, 2, (16,)).float()
    assert torch.allclose(F.binary_cross_entropy(torch.sigmoid(w), t, reduction="sum"),
                          F.binary_cross_entropy_with_logits(w, t, reduction="sum"), atol=1e-5)


def _first_layer_grad(mode: str) -> torch.Tensor:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(64, 16), torch.randn(64, 1)
    if mode == "fp32":
        ((model(x) - y) ** 2).mean().mul(1e-7).backward()
    else:
        dtype = torch.bfloat16 if mode == "bf16" else torch.float16
        with torch.autocast("cpu", dtype=dtype):
            loss = ((model(x) - y) ** 2).mean() * 1e-7
        if mode == "fp16+scaler":
            scaler = torch.amp.GradScaler("cpu")
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
        else:
            loss.backward()
    return model[0].weight.grad


@pytest.mark.proves("TP304")
def test_fp16_autocast_without_scaler_flushes_small_gradients_to_zero():
    assert torch.tensor(2e-8).half().item() == 0.0  # below half of 2**-24, the smallest subnormal
    assert torch.get_autocast_dtype("cuda") == torch.float16  # autocast("cuda") without dtype
    fp32 = _first_layer_grad("fp32")
    assert (fp32 != 0).all()
    fp16 = _first_layer_grad("fp16")
    assert (fp16 == 0).all(), fp16  # every gradient lost
    for fixed in ("fp16+scaler", "bf16"):
        grad = _first_layer_grad(fixed)
        assert (grad != 0).all() and torch.allclose(grad, fp32, rtol=0.05, atol=1e-10), fixed

    # pure float16 parameters: GradScaler refuses them
    model = nn.Linear(4, 1).half()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(model(torch.randn(2, 4).half()).sum()).backward()
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
        scaler.step(optimizer)


@pytest.mark.proves("TP305")
@pytest.mark.parametrize("opt_cls", [torch.optim.Adam, torch.optim.AdamW, torch.optim.NAdam,
                                     torch.optim.RMSprop, torch.optim.Adagrad, torch.optim.Adamax])
def test_adam_default_eps_on_fp16_params_gives_inf_and_nan(opt_cls):
    assert torch.tensor(1e-8, dtype=torch.float16).item() == 0.0
    assert torch.tensor(1e-10, dtype=torch.float16).item() == 0.0

    def one_step(**kw):
        p = nn.Parameter(torch.ones(3, dtype=torch.float16))
        optimizer = opt_cls([p], lr=1e-3, **kw)
        p.grad = torch.tensor([1e-4, 1e-6, 0.0], dtype=torch.float16)
        optimizer.step()
        return p.detach()

    broken = one_step()
    assert not torch.isfinite(broken).all(), broken
    assert torch.isnan(broken[2])  # a zero gradient: 0 / (0 + eps) with eps == 0
    assert torch.isfinite(one_step(eps=1e-4)).all()


@pytest.mark.proves("TP305")
def test_radam_fp16_goes_inf_once_its_warmup_ends():
    p = nn.Parameter(torch.ones(3, dtype=torch.float16))
    optimizer = torch.optim.RAdam([p], lr=1e-3)
    for _ in range(8):
        p.grad = torch.tensor([1e-4, 1e-3, 0.0], dtype=torch.float16)
        optimizer.step()
    assert not torch.isfinite(p).all()


@pytest.mark.proves("TP357")
def test_nll_loss_on_raw_scores_has_no_minimum_and_trains_the_scores_up_without_bound():
    scores = torch.tensor([[2.0, -1.0, 0.5]], requires_grad=True)
    loss = F.nll_loss(scores, torch.tensor([0]))
    assert loss.item() == -2.0  # just -score[target]
    loss.backward()
    assert scores.grad.tolist() == [[-1.0, 0.0, 0.0]]  # the same push whatever the other scores are

    def train(steps, log_probs):
        torch.manual_seed(0)
        model = nn.Linear(4, 3)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(1)
        x, y = torch.randn(64, 4, generator=g), torch.randint(0, 3, (64,), generator=g)
        for _ in range(steps):
            out = model(x)
            loss = F.nll_loss(F.log_softmax(out, dim=1) if log_probs else out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return loss.item(), F.cross_entropy(model(x), y).item()

    raw_200, ce_raw_200 = train(200, False)
    raw_400, ce_raw_400 = train(400, False)
    right, ce_right = train(200, True)
    assert raw_200 < -5 and raw_400 < 1.8 * raw_200  # keeps falling, about linearly: no minimum
    assert ce_raw_400 > ce_raw_200 > ce_right  # while the real cross-entropy gets worse
