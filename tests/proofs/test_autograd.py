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
    delta = torch.zeros(3).uniform_(-0.1, 0.1).requires_grad_()
    x_adv = torch.randn(3).clone().detach().requires_grad_(True)
    for leaf in (delta, x_adv):
        assert leaf.is_leaf
        with pytest.raises(RuntimeError, match=leaf_msg):
            leaf += 0.01

    before = w.detach().clone()
    with torch.no_grad():  # the same update under no_grad is fine
        w -= 0.1 * w.grad
        w[0] = 1.0
    assert w.is_leaf and w.requires_grad and not torch.equal(w.detach(), before)

    # What reaches the write decides, not what the attribute is elsewhere: past an exit on
    # `isinstance(self.b, nn.Parameter)`, `self.b` is the plain tensor `fit` made (`full_like` of a
    # Parameter does not require grad), and the Parameter bound after the write is not written.
    class Shift(torch.nn.Module):
        def fit(self, scale):
            self.b = torch.full_like(scale, 0.5)

        def learn_bias(self, centred):
            if isinstance(self.b, torch.nn.Parameter):
                return
            if centred:
                self.b.zero_()
            else:
                self.b = torch.nn.Parameter(self.b.clone())

    shift = Shift()
    shift.fit(torch.nn.Parameter(torch.ones(3)))
    assert not shift.b.requires_grad
    shift.learn_bias(centred=True)
    shift.learn_bias(centred=False)
    shift.learn_bias(centred=True)  # a Parameter now: the guard returns before the write
    assert isinstance(shift.b, torch.nn.Parameter) and shift.b.detach().eq(0).all()


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


def _weight_grad(model, loss_fn):
    model.zero_grad()
    loss = loss_fn()
    loss.backward()
    return loss.item(), model.weight.grad.clone()


@pytest.mark.proves("TP207")
def test_inplace_under_no_grad_on_graph_tensor_gives_wrong_gradients():
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 5)
    x, y = torch.randn(3, 4), torch.tensor([0, 1, 2])
    mask = torch.zeros(3, 5, dtype=torch.bool)
    mask[:, 4] = True

    def clamp_inplace():
        logits = lin(x) * 3
        with torch.no_grad():
            logits.clamp_(-0.5, 0.5)
        return F.cross_entropy(logits, y)

    def div_inplace():
        logits = lin(x)
        with torch.no_grad():
            logits.div_(2.0)
        return F.cross_entropy(logits, y)

    def fill_inplace(value, loss):
        def fn():
            out = lin(x)
            with torch.no_grad():
                out[mask] = value
            return loss(out)
        return fn

    def fill_out_of_place(value, loss):
        return lambda: loss(lin(x).masked_fill(mask, value))

    ce = lambda out: F.cross_entropy(out, y)  # noqa: E731
    mse = lambda out: F.mse_loss(out, torch.zeros(3, 5))  # noqa: E731
    pairs = [
        (clamp_inplace, lambda: F.cross_entropy((lin(x) * 3).clamp(-0.5, 0.5), y)),
        (div_inplace, lambda: F.cross_entropy(lin(x) / 2.0, y)),
        (fill_inplace(0.0, ce), fill_out_of_place(0.0, ce)),
        (fill_inplace(-1e9, mse), fill_out_of_place(-1e9, mse)),
    ]
    for inplace, out_of_place in pairs:
        loss_a, grad_a = _weight_grad(lin, inplace)
        loss_b, grad_b = _weight_grad(lin, out_of_place)
        assert loss_a == pytest.approx(loss_b)  # same loss value...
        assert (grad_a - grad_b).abs().max() > 0.01  # ...silently different gradients, no error

    # masking with -1e9 / -inf before cross_entropy: identical gradients (not flagged)
    for value in (-1e9, float("-inf")):
        _, grad_a = _weight_grad(lin, fill_inplace(value, ce))
        _, grad_b = _weight_grad(lin, fill_out_of_place(value, ce))
        assert torch.equal(grad_a, grad_b)

    # the producing op saved its output: backward raises instead
    def sigmoid_inplace():
        h = torch.sigmoid(lin(x))
        with torch.no_grad():
            h.clamp_(0.2, 0.8)
        return F.mse_loss(h, torch.zeros(3, 5))
    with pytest.raises(RuntimeError, match="modified by an inplace operation.*"
                                           "output 0 of Sigmoid, is at version 1; expected version 0"):
        _weight_grad(lin, sigmoid_inplace)


@pytest.mark.proves("TP201")
def test_data_write_between_forward_and_backward_silently_changes_gradients():
    def setup():
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        x = torch.tensor([3.0, 4.0], requires_grad=True)
        return w, x, (w * x).sum()  # mul saves w to compute x.grad

    for write in (lambda w: w.data.mul_(2), lambda w: setattr(w, "data", w.data * 2)):
        w, x, y = setup()
        write(w)
        y.backward()  # no error...
        assert torch.equal(x.grad, torch.tensor([2.0, 4.0]))  # ...but d(sum(w*x))/dx used the new w
        assert y.item() == 11.0  # while the loss was computed with the old one

    version_msg = "modified by an inplace operation: .* is at version 1; expected version 0 instead"
    for visible in (lambda w: w.detach().mul_(2), lambda w: w.mul_(2)):
        w, x, y = setup()
        with torch.no_grad():
            visible(w)
        with pytest.raises(RuntimeError, match=version_msg):
            y.backward()

    # the same write after backward (e.g. weight clipping after the step) is harmless
    w, x, y = setup()
    y.backward()
    w.data.clamp_(-1.5, 1.5)
    assert torch.equal(x.grad, torch.tensor([1.0, 2.0]))
