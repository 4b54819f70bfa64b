"""Proofs for autograd rules: the pitfall, run with real torch, has the consequence the docs name."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

NON_LEAF_GRAD_WARNING = "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed"


def _grad_read(t):
    """``t.grad`` and the warnings torch emitted while reading it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = t.grad
    return g, [str(w.message) for w in caught]


@pytest.mark.proves("TP202")
def test_inplace_update_of_grad_leaf_raises_outside_no_grad():
    leaf_msg = "a leaf Variable that requires grad is being used in an in-place operation."
    w = torch.randn(3, requires_grad=True)
    (w * 2).sum().backward()
    with pytest.raises(RuntimeError, match=leaf_msg):
        w -= 0.1 * w.grad
    with pytest.raises(RuntimeError, match=leaf_msg):
        w.sub_(0.1 * w.grad)
    with pytest.raises(RuntimeError, match=leaf_msg):
        w.zero_()
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad is being used"):
        w[0] = 1.0

    model = torch.nn.Linear(2, 2)
    with pytest.raises(RuntimeError, match=leaf_msg):
        for p in model.parameters():
            p.add_(1.0)
    with pytest.raises(RuntimeError, match=leaf_msg):
        torch.nn.Parameter(torch.ones(2)).mul_(2)

    before = w.detach().clone()
    with torch.no_grad():  # the same update under no_grad is fine
        w -= 0.1 * w.grad
        w[0] = 1.0
    assert w.is_leaf and w.requires_grad and not torch.equal(w.detach(), before)


@pytest.mark.proves("TP205")
def test_numpy_on_tensor_that_requires_grad_raises():
    msg = r"Can't call numpy\(\) on Tensor that requires grad. Use tensor.detach\(\).numpy\(\) instead."
    w = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=msg):
        w.numpy()
    model = torch.nn.Linear(3, 2)
    logits = model(torch.randn(4, 3))
    loss = logits.pow(2).mean()
    loss.backward()
    with pytest.raises(RuntimeError, match=msg):
        loss.cpu().numpy()
    with pytest.raises(RuntimeError, match=msg):
        logits[:, 0].float().numpy()
    assert logits.argmax(-1).numpy().shape == (4,)  # argmax does not require grad
    # torch checks only while grad mode is on: under no_grad / inference_mode the same call works
    with torch.no_grad():
        assert logits.numpy().shape == (4, 2)
    with torch.inference_mode():
        assert w.numpy().shape == (3,)
    # the fix: same values, no error
    assert (w.detach().numpy() == w.tolist()).all()
    assert loss.cpu().detach().numpy() == pytest.approx(loss.item())


@pytest.mark.proves("TP206")
def test_backward_of_value_computed_without_grad_raises():
    msg = "element 0 of tensors does not require grad and does not have a grad_fn"
    model = torch.nn.Linear(3, 1)
    x, y = torch.randn(4, 3), torch.randn(4, 1)
    with torch.no_grad():
        loss = F.mse_loss(model(x), y)
    assert loss.grad_fn is None and not loss.requires_grad
    with pytest.raises(RuntimeError, match=msg):
        loss.backward()
    with torch.inference_mode():
        loss = F.mse_loss(model(x), y)
        with pytest.raises(RuntimeError, match=msg):
            loss.backward()
    with torch.no_grad():
        score = model(x).max()
    with pytest.raises(RuntimeError, match=msg):
        torch.autograd.grad(score, model.weight)

    # not flagged: backward() inside no_grad of a graph built outside it works
    loss = F.mse_loss(model(x), y)
    with torch.no_grad():
        loss.backward()
    assert model.weight.grad is not None and model.weight.grad.abs().sum() > 0


@pytest.mark.proves("TP204")
def test_grad_of_non_leaf_is_none_with_a_warning():
    x = torch.randn(3, requires_grad=True)
    y = x * 2
    logits = torch.nn.Linear(3, 2)(x)
    (y.sum() + logits.sum()).backward()
    for non_leaf in (y, logits):
        g, warned = _grad_read(non_leaf)
        assert g is None
        assert any(NON_LEAF_GRAD_WARNING in w and ".retain_grad()" in w for w in warned), warned
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'norm'"):
        _grad_read(logits)[0].norm()
    assert x.grad is not None  # the leaf gets its gradient

    v = x.float()  # a conversion that changes nothing returns the leaf itself: not flagged
    assert v is x and v.is_leaf

    y = x * 2
    y.retain_grad()
    y.sum().backward()
    g, warned = _grad_read(y)
    assert torch.equal(g, torch.ones(3)) and not warned


@pytest.mark.proves("TP203")
def test_requires_grad_then_conversion_leaves_grad_none():
    x = torch.randn(3, dtype=torch.float64)
    for w in (torch.randn(3, requires_grad=True).double(), torch.randn(3, requires_grad=True).to(torch.float64)):
        assert not w.is_leaf and type(w.grad_fn).__name__ == "ToCopyBackward0"
        (w * x).sum().backward()
        g, warned = _grad_read(w)
        assert g is None and any(NON_LEAF_GRAD_WARNING in m for m in warned)
        with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
            torch.optim.SGD([w], lr=0.1)

    p = torch.nn.Parameter(torch.ones(3)).to(torch.float64)
    assert type(p) is torch.Tensor and not p.is_leaf  # no longer a Parameter: a module would not register it
    m = torch.nn.Module()
    m.scale = p
    assert list(m.parameters()) == []

    # a conversion that changes nothing returns the leaf itself: why `.to("cpu")` is not flagged,
    # and why `.to(device)` code works on a CPU machine and breaks on a GPU
    w = torch.randn(3, requires_grad=True)
    assert w.to("cpu") is w and w.float() is w

    # the fixes are exact and give leaves
    torch.manual_seed(0)
    before = torch.randn(3, requires_grad=True).double()
    torch.manual_seed(0)
    fixed = torch.randn(3).double().requires_grad_()
    assert torch.equal(before, fixed) and fixed.is_leaf and fixed.requires_grad
    moved = torch.zeros(3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.equal(moved, torch.zeros(3, 4, requires_grad=True).to(torch.float64)) and moved.is_leaf
    (moved.sum() + fixed.sum()).backward()
    assert moved.grad is not None and fixed.grad is not None
    # ...and why the dtype is not moved into torch.tensor / random factories: the values would differ
    assert not torch.equal(torch.tensor([0.1]).double(), torch.tensor([0.1], dtype=torch.float64))
    param = torch.nn.Parameter(torch.ones(3).to(torch.float64))
    assert isinstance(param, torch.nn.Parameter) and param.dtype == torch.float64
