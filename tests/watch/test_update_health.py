"""Runtime TP454 / TP455: steps that leave the weights where they were."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tests.watch.util import codes, watched
from torchpact.watch import Sampler


class RebindingSGD(torch.optim.Optimizer):
    """A hand-written SGD whose update rebinds a local name instead of writing into the parameter."""

    def __init__(self, params, lr):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p = p - group["lr"] * p.grad


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 3))


def _train(model, opt, sched=None, steps=30, clip=False):
    for _ in range(steps):
        x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        if clip:
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if sched is not None:
            sched.step()


def test_an_update_that_never_reaches_the_weights_is_reported_with_the_optimizer_line():
    model = _model()
    before = [p.clone() for p in model.parameters()]

    def run():
        opt = RebindingSGD(model.parameters(), lr=0.1)
        _train(model, opt)
    findings = watched(run, ["update_health"])
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))  # the consequence
    [f] = [f for f in findings if f.code == "TP454"]
    assert "step() of the RebindingSGD created at test_update_health.py:" in f.message and f.line is not None
    assert f.path.endswith("test_update_health.py") and f.subject == "0.weight" and "`0.bias`" in f.message


def test_integer_division_in_a_warmup_factor_keeps_lr_at_zero():
    model = _model()
    start = [p.clone() for p in model.parameters()]

    def run():
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1, s // 100))  # 0 for 100 steps
        _train(model, opt, sched, steps=25)
    findings = watched(run, ["update_health"])
    assert all(torch.equal(a, b) for a, b in zip(start, model.parameters(), strict=True))  # AdamW: nothing moved
    [f] = [f for f in findings if f.code == "TP455"]
    assert "20 consecutive steps" in f.message and f.path.endswith("test_update_health.py")


def test_clean_runs_with_warmup_schedulers_weight_decay_and_clipping_are_silent():
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    warm = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / 10))  # lr 0 at step 0 only
    assert codes(watched(lambda: _train(model, opt, warm, clip=True), ["update_health"])) == []
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 30)
    assert codes(watched(lambda: _train(model, opt, cos), ["update_health"])) == []
    torch.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 36, 3))
    opt = torch.optim.Adam(cnn.parameters(), lr=1e-4)

    def train_cnn():
        for _ in range(25):
            opt.zero_grad()
            nn.functional.cross_entropy(cnn(torch.randn(4, 3, 8, 8)), torch.randint(0, 3, (4,))).backward()
            opt.step()
    assert codes(watched(train_cnn, ["update_health"])) == []


class _Unused(nn.Module):
    """``b``'s output is multiplied by 0: its gradient is exactly zero and plain SGD leaves it as it was."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(8, 3), nn.Linear(8, 3)

    def forward(self, x):
        return self.a(x) + 0 * self.b(x)


def test_unchanged_parameters_whose_update_could_not_show_are_not_lost_updates():
    model = _Unused()
    before = model.b.weight.clone()
    assert codes(watched(lambda: _train(model, torch.optim.SGD(model.parameters(), lr=0.1)), ["update_health"])) == []
    assert torch.equal(before, model.b.weight)  # zero gradient: not moved, and rightly so
    model = _model()
    start = [p.clone() for p in model.parameters()]
    tiny = torch.optim.SGD(model.parameters(), lr=1e-12)  # lr·|g| far below float32's resolution of |w|
    assert codes(watched(lambda: _train(model, tiny), ["update_health"])) == []
    assert all(torch.equal(a, b) for a, b in zip(start, model.parameters(), strict=True))  # not moved, and rightly so


def test_a_learning_rate_far_too_high_rewrites_the_weights_every_step():
    model = _model()

    def run():
        opt = torch.optim.Adam(model.parameters(), lr=1.0)  # meant for another optimizer
        _train(model, opt, steps=16)
    found = [f for f in watched(run, ["update_health"]) if f.code == "TP463"]
    assert found and all(f.severity.value == "info" for f in found)
    assert "of its norm" in found[0].message and found[0].path.endswith("test_update_health.py")


def test_each_optimizer_gets_its_own_first_steps_before_ratios_count():
    # layer-wise training (pytorch/examples mnist_forward_forward): the second layer's optimizer starts
    # after the first one's 12 steps; its own first, largest updates are not "every step"
    model = _model()

    def run():
        first = torch.optim.SGD(model[0].parameters(), lr=1e-3)
        _train(model, first, steps=12)
        late = torch.optim.Adam(model[3].parameters(), lr=1.0)
        _train(model, late, steps=8)
    every_step = Sampler(first=10**9, calls=None)  # which steps count, not which ones are seen
    assert "TP463" not in codes(watched(run, ["update_health"], every_step))

    def longer():
        first = torch.optim.SGD(model[0].parameters(), lr=1e-3)
        _train(model, first, steps=12)
        late = torch.optim.Adam(model[3].parameters(), lr=1.0)
        _train(model, late, steps=18)
    assert "TP463" in codes(watched(longer, ["update_health"], every_step))


def test_batched_comparison_keeps_the_per_parameter_results_in_every_corner():
    """A few batched ops per device and dtype instead of a clone and a comparison per parameter: the same
    `!=` (inf == inf and -0.0 == 0.0 unchanged, NaN changed, float64 changes invisible in float32 still
    seen) and the same update ratio; a slice that changed shape or dtype counts as changed with an
    unknown ratio."""
    from torchpact.watch.watchers.update_health import Snapshot

    inf, nan = float("inf"), float("nan")
    pairs = [
        (torch.tensor([1.0, inf, -inf]), torch.tensor([1.0, inf, -inf])),
        (torch.tensor([0.0, 2.0]), torch.tensor([-0.0, 2.0])),
        (torch.tensor([nan, 1.0]), torch.tensor([nan, 1.0])),
        (torch.tensor([1.0, 2.0], dtype=torch.float64), torch.tensor([1.0 + 1e-12, 2.0], dtype=torch.float64)),
        (torch.tensor([1.0, 2.0], dtype=torch.bfloat16), torch.tensor([1.0, 2.5], dtype=torch.bfloat16)),
        (torch.tensor([0.0, 0.0]), torch.tensor([0.0, 3.0])),
        (torch.randn(7), None),
        (torch.randn(3), torch.randn(4)),
        (torch.randn(3), torch.randn(3, dtype=torch.float64)),
        (torch.randn(2, 3), torch.randn(3, 2)),
        (torch.tensor([6e4, 6e4], dtype=torch.float16), torch.tensor([6e4, 5e4], dtype=torch.float16)),
    ]
    got = Snapshot([before for before, _ in pairs]).changes([now for _, now in pairs])

    def one_by_one(before, now):
        if now is None or now.shape != before.shape or now.dtype != before.dtype:
            return True, None
        ratio = (now.float() - before.float()).norm() / before.float().norm().clamp_min(1e-12)
        return bool((now != before).any()), ratio.item()

    for (changed, ratio), (before, now) in zip(got, pairs, strict=True):
        want_changed, want_ratio = one_by_one(before, now)
        assert changed == want_changed
        if want_ratio is None or math.isnan(want_ratio):
            assert math.isnan(ratio)
        else:
            assert abs(ratio - want_ratio) <= 1e-6 * max(1.0, want_ratio)
    assert [c for c, _ in got] == [False, False, True, True, True, True, True, True, True, True, True]
    assert 0.11 < got[-1][1] < 0.12  # norms of half-precision slices summed in float32: not 1e4 / inf


def test_complex_parameters_are_compared_through_their_real_and_imaginary_parts():
    class Rotor(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 4, dtype=torch.cfloat))
            self.head = nn.Linear(4, 1)

        def forward(self, x):
            return self.head((x.to(torch.cfloat) @ self.w).abs())

    def train():
        torch.manual_seed(0)
        model = Rotor()
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        for _ in range(25):
            opt.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
            opt.step()

    assert codes(watched(train)) == []  # no watcher fails on them (TP002) and nothing is stale


def test_a_model_of_one_parameter_is_compared_with_a_copy_of_it():
    """``flatten_dense_tensors`` of a single tensor is a view of it: the snapshot must copy it, or every
    step would look like one that left the weights unchanged."""
    def train():
        torch.manual_seed(0)
        w = nn.Parameter(torch.randn(3))
        opt = torch.optim.SGD([w], lr=0.1)
        for _ in range(25):
            opt.zero_grad()
            x = torch.randn(16, 3)
            ((x @ w - x.sum(dim=1)) ** 2).mean().backward()
            opt.step()

    assert codes(watched(train, ["update_health"])) == []


# ---------------------------------------------------------------------------------------- resolution
# Written before the check was tuned for them (issue 31). The contract: a parameter that has a finite, non-zero
# gradient did not change across step() although the update the optimizer computed (lr * grad for SGD, with its
# momentum buffer; lr * m / (sqrt(v) + eps) for Adam, with decoupled decay) is at least twice the float spacing
# of one of its values: the update never reached it. Updates below the spacing are not lost, they are too small.
import pytest  # noqa: E402

from tests.watch import _resolution_cases as cases  # noqa: E402

CHECKS = ["update_health", "grad_health", "gradient_flow"]


def _warnings(findings):
    return [(f.code, f.subject) for f in findings if f.severity.value != "info"]


@pytest.mark.parametrize("layout, lr, momentum", [("linear", 0.01, 0.0), ("linear", 0.1, 0.9),
                                                  ("conv", 0.01, 0.0), ("conv", 0.1, 0.0)])
def test_a_bias_in_front_of_batchnorm_trained_by_sgd_is_not_a_lost_update(layout, lr, momentum):
    for seed in range(3):
        model, train = cases.bias_into_batchnorm(layout, lr, momentum, seed)
        assert _warnings(watched(train, CHECKS)) == [], (layout, lr, momentum, seed)
    # what torch does: BatchNorm cancels the bias's gradient to rounding noise
    model[0].zero_grad()
    x = torch.randn(32, 8) if layout == "linear" else torch.randn(16, 3, 8, 8)
    model(x).pow(2).mean().backward()
    assert model[0].bias.grad.abs().max() < 1e-6 * model[0].weight.grad.abs().max()


@pytest.mark.parametrize("seed", range(3))
def test_zero_initialised_residual_batchnorm_under_warmup_is_silent(seed):
    model, train = cases.zero_init_resnet(seed)
    assert _warnings(watched(train, CHECKS)) == []


def test_the_branch_behind_a_zero_batchnorm_weight_gets_exactly_zero_gradients_at_first():
    model, _ = cases.zero_init_resnet(0)
    F.cross_entropy(model(torch.randn(16, 3, 8, 8)), torch.randint(0, 3, (16,))).backward()
    block = model[3]
    assert all(torch.count_nonzero(p.grad) == 0 for m in (block.conv1, block.bn1, block.conv2) for p in m.parameters())
    assert torch.count_nonzero(block.bn2.weight.grad) > 0  # the gate itself trains


@pytest.mark.parametrize("seed", range(3))
def test_an_attention_key_bias_under_adam_warmup_is_silent(seed):
    model, train = cases.attention_with_key_bias(seed)
    assert _warnings(watched(train, CHECKS)) == []
    model[1].zero_grad()
    model(torch.randn(4, 6, 8)).pow(2).sum().backward()  # softmax ignores a constant added to every key
    assert model[1].k.bias.grad.abs().max() < 1e-6 * model[1].k.weight.grad.abs().max()


class LostWriteAdam(torch.optim.Adam):
    """pytorch#115607's class: Adam computes its update (and advances its state) but it never reaches the weights."""

    @torch.no_grad()
    def step(self, closure=None):
        params = [p for g in self.param_groups for p in g["params"]]
        before = [p.clone() for p in params]
        super().step(closure)
        for p, b in zip(params, before, strict=True):
            p.copy_(b)


@pytest.mark.parametrize("make", [
    lambda ps: LostWriteAdam(ps, lr=1e-3),
    lambda ps: RebindingSGD(ps, lr=0.1),
    lambda ps: RebindingSGD(ps, lr=1e-4),
], ids=["adam-lost-write", "rebinding-sgd", "rebinding-sgd-small-lr"])
def test_lost_updates_are_still_reported_and_name_the_parameters(make):
    model = _model()
    found = [f for f in watched(lambda: _train(model, make(model.parameters())), ["update_health"])
             if f.code == "TP454"]
    assert [f.severity.value for f in found] == ["warning"]
    assert found[0].subject == "0.weight" and "`0.weight`" in found[0].message and "`3.bias`" in found[0].message


def test_a_lost_update_on_a_bias_in_front_of_batchnorm_is_still_reported_with_adam():
    """Adam rescales even a rounding-noise gradient to a visible step: its loss is a lost update."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 3))
    found = [f for f in watched(lambda: _train(model, LostWriteAdam(model.parameters(), lr=1e-3)), ["update_health"])
             if f.code == "TP454"]
    assert found and "`0.bias`" in found[0].message
