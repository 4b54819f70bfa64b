"""Proofs for training rules: the pitfall, run with real torch, has the consequence the docs name."""

from __future__ import annotations

import pytest
import torch
from torch import nn


def _batches(n: int):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)) for _ in range(n)]


@pytest.mark.proves("TP401")
def test_without_zero_grad_each_step_applies_the_sum_of_all_gradients():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    (x1, y1), (x2, y2) = _batches(2)

    nn.functional.mse_loss(model(x1), y1).backward()
    g1 = model.weight.grad.clone()
    nn.functional.mse_loss(model(x2), y2).backward()
    g_both = model.weight.grad.clone()

    model.zero_grad()
    nn.functional.mse_loss(model(x2), y2).backward()
    g2 = model.weight.grad.clone()
    assert torch.allclose(g_both, g1 + g2)  # backward() adds into .grad
    assert not torch.allclose(g_both, g2)

    # in a loop with optimizer.step(): the SGD update at step n is lr * (g1 + ... + gn)
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    fresh_sum = torch.zeros_like(model.weight)
    for x, y in _batches(3):
        before = model.weight.detach().clone()
        loss = nn.functional.mse_loss(model(x), y)
        fresh_sum += torch.autograd.grad(loss, model.weight, retain_graph=True)[0]  # this batch alone
        loss.backward()
        assert torch.allclose(model.weight.grad, fresh_sum, atol=1e-6)  # .grad holds every batch so far
        optimizer.step()
        assert torch.allclose(before - model.weight.detach(), 0.1 * fresh_sum, atol=1e-6)

    # a loop over models (a new one each iteration) has nothing to clear: each model's .grad
    # starts empty and receives exactly its one backward, although nothing calls zero_grad()
    x, y = _batches(1)[0]
    for width in (1, 2, 3):
        fresh = nn.Linear(4, width)
        assert fresh.weight.grad is None
        loss = nn.functional.mse_loss(fresh(x), y.expand(-1, width))
        alone = torch.autograd.grad(loss, fresh.weight, retain_graph=True)[0]
        loss.backward()
        assert torch.equal(fresh.weight.grad, alone)


class _DropoutNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 64)
        self.drop = nn.Dropout(0.5)
        self.bn = nn.BatchNorm1d(64)

    def forward(self, x):
        return self.bn(self.drop(self.fc(x)))


def _evaluate(model):
    model.eval()
    with torch.no_grad():
        return model(torch.randn(4, 64)).sum().item()


@pytest.mark.proves("TP402")
def test_eval_inside_the_epoch_loop_leaves_later_epochs_in_eval_mode():
    torch.manual_seed(0)
    model = _DropoutNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 64)

    model.train()  # only before the loop
    modes, repeat_differs, stats_moved = [], [], []
    for _ in range(3):  # epochs
        modes.append(model.training)
        a, b = model(x), model(x)
        repeat_differs.append(not torch.equal(a, b))  # dropout active -> two calls differ
        mean_before = model.bn.running_mean.clone()
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()
        stats_moved.append(not torch.equal(mean_before, model.bn.running_mean))
        _evaluate(model)

    assert modes == [True, False, False]
    assert repeat_differs == [True, False, False]  # dropout off from the second epoch on
    assert stats_moved == [True, False, False]  # BatchNorm statistics frozen
    assert all(not m.training for m in model.modules())


def _train_mlp(eval_mode: bool) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(inplace=True), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model.train()
    for x, y in _batches(5):
        if eval_mode:
            model.eval()  # left on for every later step
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.proves("TP402")
def test_eval_mode_changes_nothing_in_a_model_without_mode_dependent_modules():
    trained, in_eval = _train_mlp(False), _train_mlp(True)
    assert all(torch.equal(a, b) for a, b in zip(trained, in_eval, strict=True))  # bit for bit


class _BuildsDropout:
    def __init__(self, *args, **kwargs):
        self.drop = nn.Dropout(0.5)


class _MixinAfterModule(nn.Module, _BuildsDropout):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)


def test_module_init_never_runs_the_init_of_a_base_listed_after_it():
    # TP402 counts a base this file does not show only when listed before nn.Module
    assert not hasattr(_MixinAfterModule(), "drop")
    assert not any(isinstance(m, nn.Dropout) for m in _MixinAfterModule().modules())


def test_mode_dependent_set_is_every_torch_nn_module_that_reads_training():
    import ast
    import inspect
    import textwrap

    from torchpact.lint.rules.training._mode_dependence import MODE_DEPENDENT

    reads = set()
    for name in dir(nn):
        cls = getattr(nn, name)
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)) or cls is nn.Module:
            continue
        for klass in cls.__mro__:
            if klass in (nn.Module, object) or not klass.__module__.startswith("torch.nn"):
                continue
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
            if any(isinstance(n, ast.Attribute) and n.attr == "training" and isinstance(n.ctx, ast.Load)
                   for n in ast.walk(tree)):
                reads.add(name)
    # Transformer and its decoder (layer) read nothing themselves but always build Dropout layers
    assert reads <= MODE_DEPENDENT, sorted(reads - MODE_DEPENDENT)
    assert MODE_DEPENDENT <= reads | {"Transformer", "TransformerDecoder", "TransformerDecoderLayer"}, sorted(
        MODE_DEPENDENT - reads)


class _PlainList(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 4)
        self.layers = [nn.Linear(4, 4) for _ in range(2)]
        self.drops = [nn.Dropout(0.5)]


class _Registered(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 4)
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])
        self.drops = nn.ModuleList([nn.Dropout(0.5)])


@pytest.mark.proves("TP403")
def test_modules_in_a_plain_list_are_not_registered():
    plain = _PlainList()
    assert len(list(plain.parameters())) == 2  # only head.weight / head.bias
    assert set(plain.state_dict()) == {"head.weight", "head.bias"}
    plain.to(torch.float64)
    assert plain.head.weight.dtype == torch.float64
    assert plain.layers[0].weight.dtype == torch.float32  # .to() never reached it
    plain.eval()
    assert plain.drops[0].training  # .eval() never reached it: dropout stays on

    optimizer = torch.optim.SGD(plain.parameters(), lr=0.1)
    before = plain.layers[0].weight.detach().clone()
    x = torch.randn(3, 4, dtype=torch.float64)
    plain.layers[0].double()
    plain.head(plain.layers[0](x)).sum().backward()
    optimizer.step()
    assert torch.equal(before.double(), plain.layers[0].weight.detach())  # never trained

    fixed = _Registered()
    assert len(list(fixed.parameters())) == 6
    assert "layers.1.weight" in fixed.state_dict()
    fixed.to(torch.float64).eval()
    assert fixed.layers[1].weight.dtype == torch.float64 and not fixed.drops[0].training


@pytest.mark.proves("TP404")
@pytest.mark.parametrize("order", ["zero,step,backward", "backward,zero,step"])
def test_step_between_zero_grad_and_backward_never_updates(order):
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    start = [p.detach().clone() for p in model.parameters()]
    for opt_cls in (torch.optim.SGD, torch.optim.AdamW):
        optimizer = opt_cls(model.parameters(), lr=0.1)
        for x, y in _batches(5):
            loss = nn.functional.mse_loss(model(x), y)
            for action in order.split(","):
                {"zero": optimizer.zero_grad, "step": optimizer.step, "backward": loss.backward}[action]()
        assert all(torch.equal(a, b) for a, b in zip(start, model.parameters(), strict=True)), opt_cls

    # the right order trains
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in _batches(5):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    assert not torch.equal(start[0], model.weight)
