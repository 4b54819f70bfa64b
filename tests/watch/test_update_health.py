"""Runtime TP454 / TP455: steps that leave the weights where they were."""

from __future__ import annotations

import math

import torch
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
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # the consequence
    [f] = [f for f in findings if f.code == "TP454"]
    assert "step() of the RebindingSGD created at test_update_health.py:" in f.message and f.line is not None
    assert f.path.endswith("test_update_health.py") and "`0`" in f.message


def test_integer_division_in_a_warmup_factor_keeps_lr_at_zero():
    model = _model()
    start = [p.clone() for p in model.parameters()]

    def run():
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1, s // 100))  # 0 for 100 steps
        _train(model, opt, sched, steps=25)
    findings = watched(run, ["update_health"])
    assert all(torch.equal(a, b) for a, b in zip(start, model.parameters()))  # AdamW: nothing moved
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
    assert all(torch.equal(a, b) for a, b in zip(start, model.parameters()))  # not moved, and rightly so


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

    for (changed, ratio), (before, now) in zip(got, pairs):
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
