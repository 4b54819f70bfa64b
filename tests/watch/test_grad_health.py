"""grad_health: TP353 (exploding) and TP354 (vanishing) gradients per layer, and the per-layer series."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.watch.test_nonfinite import (
    _cnn_training,
    _gan_training,
    _grad_scaler_training,
    _transformer_training,
)
from tests.watch.util import codes
from torchpact.findings import Severity
from torchpact.watch import Sampler, watch
from torchpact.watch.watchers.grad_health import MAX_POINTS, GradHealth

WATCHER = ["grad_health"]
EVERY_STEP = Sampler(first=10**9, calls=None)  # what the checks make of each step, not which steps they see


def run(fn, sampler=None):
    with watch(WATCHER, sampler=sampler) as session:
        fn()
    (watcher,) = session.watchers
    return session.findings, watcher


# ------------------------------------------------------------------------------------------ exploding
def _diverging_regression(clip: float | None = None, steps: int = 25):
    """A learning rate too high for the model: the gradient norm grows from 4 to 1e7 in 25 steps."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.3)
    x, y = torch.randn(64, 16) * 3, torch.randn(64, 1) * 3
    for _ in range(steps):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()


def test_exploding_gradients_are_reported_with_their_trend():
    findings, watcher = run(_diverging_regression)
    assert codes(findings) == ["TP353"]
    (f,) = findings
    # the default schedule: steps 0-9, then 20 (one in 20), where the jump is seen, and 21 that it asks for
    assert f.subject == "0" and f.severity is Severity.WARNING and f.step == 21
    assert f.extra["factor"] >= 100 and "(step 20)" in f.message and "clip_grad_norm_" in f.fix
    series = dict(watcher.series["0"])
    assert sorted(series) == [*range(10), 20, 21] and series[21] > 1e4 * series[0]


def test_the_same_run_with_clipping_is_silent():
    findings, _ = run(lambda: _diverging_regression(clip=1.0))
    assert findings == []


def test_a_transient_spike_that_recovers_is_not_exploding():
    # lr 0.1: the gradient norm goes 1 -> 25 -> 5 within a few steps, then training settles
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(64, 16) * 3, torch.randn(64, 1) * 3

    def train():
        for _ in range(25):
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    findings, watcher = run(train, sampler=EVERY_STEP)
    assert findings == []
    norms = [n for _, n in watcher.series["0"]]
    assert max(norms) > 10 * min(norms)


# ------------------------------------------------------------------------------------------ vanishing
def _sigmoid_stack(optimizer: str, loss_scale: float = 1.0, depth: int = 12):
    torch.manual_seed(0)
    layers = [m for _ in range(depth) for m in (nn.Linear(32, 32), nn.Sigmoid())]
    model = nn.Sequential(*layers, nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1) if optimizer == "sgd" else \
        torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(8):
        x, y = torch.randn(32, 32), torch.randn(32, 1)
        loss = F.mse_loss(model(x), y) * loss_scale
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_vanishing_gradients_in_a_deep_sigmoid_stack_with_sgd_warn():
    findings, _ = run(lambda: _sigmoid_stack("sgd"))
    assert codes(findings) == ["TP354"]
    (f,) = findings
    assert f.subject == "0" and f.severity is Severity.WARNING and f.step == 4  # the 5th checked step
    assert f.extra["ratio"] < 1e-4 and "barely learns" in f.message
    assert "kaiming" in f.fix


def test_vanishing_with_adam_is_info_unless_eps_dominates():
    findings, _ = run(lambda: _sigmoid_stack("adam", loss_scale=1e6))  # large gradients: Adam copes
    (f,) = findings
    assert f.code == "TP354" and f.severity is Severity.INFO and "Adam rescales" in f.message
    findings, _ = run(lambda: _sigmoid_stack("adam"))  # gradients of 1e-11: below eps = 1e-8
    (f,) = findings
    assert f.severity is Severity.WARNING and "eps" in f.message


def test_a_shallow_sigmoid_stack_is_not_vanishing():
    findings, _ = run(lambda: _sigmoid_stack("sgd", depth=3))
    assert findings == []


# ------------------------------------------------------------------------------------------ clean loops
def _gpt_like(steps: int = 20):
    torch.manual_seed(0)
    vocab, d = 300, 32
    emb = nn.Embedding(vocab, d)
    blocks = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 4, 64, dropout=0.0, batch_first=True,
                                                              norm_first=True), 2, enable_nested_tensor=False)
    head = nn.Linear(d, vocab)
    params = [*emb.parameters(), *blocks.parameters(), *head.parameters()]
    opt = torch.optim.AdamW(params, lr=3e-3, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps, pct_start=0.3)
    mask = nn.Transformer.generate_square_subsequent_mask(16)
    for _ in range(steps):
        tokens = torch.randint(0, vocab, (8, 17))
        logits = head(blocks(emb(tokens[:, :-1]), mask=mask, is_causal=True))
        loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()


def _lora_zero_init():
    class Lora(nn.Module):
        def __init__(self, d=32, r=4):
            super().__init__()
            self.base = nn.Linear(d, d).requires_grad_(False)
            self.A = nn.Linear(d, r, bias=False)
            self.B = nn.Linear(r, d, bias=False)
            nn.init.zeros_(self.B.weight)  # the adapter starts as a no-op: A's gradient starts at exactly 0

        def forward(self, x):
            return self.base(x) + self.B(self.A(x))

    torch.manual_seed(0)
    model = nn.Sequential(Lora(), nn.ReLU(), Lora(), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], 1e-3)
    for _ in range(25):
        loss = F.mse_loss(model(torch.randn(32, 32)), torch.randn(32, 1))
        opt.zero_grad()
        loss.backward()
        opt.step()


def _lstm_with_clipping():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(100, 16)
            self.rnn = nn.LSTM(16, 32, 2, batch_first=True)
            self.head = nn.Linear(32, 100)

        def forward(self, x):
            return self.head(self.rnn(self.emb(x))[0])

    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    for _ in range(25):
        x = torch.randint(0, 100, (4, 20))
        loss = F.cross_entropy(model(x).reshape(-1, 100), x.roll(-1, 1).reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()


def _relu_mlp_deep():
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(32, 32), nn.ReLU())], nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    for _ in range(25):
        loss = F.mse_loss(model(torch.randn(32, 32)), torch.randn(32, 1))
        opt.zero_grad()
        loss.backward()
        opt.step()


@pytest.mark.parametrize("train", [_gpt_like, _lora_zero_init, _lstm_with_clipping, _relu_mlp_deep, _cnn_training,
                                   _transformer_training, _gan_training, _grad_scaler_training])
def test_clean_training_is_silent(train):
    findings, _ = run(train)
    assert findings == []


def test_scaled_gradients_of_a_grad_scaler_aware_optimizer_are_unscaled():
    findings, watcher = run(_grad_scaler_training)  # fused Adam: step() sees gradients times 2**18 and more
    assert findings == []
    head = watcher.series["2"]
    assert head and all(0 < n < 1e4 for _, n in head)


def test_series_is_plain_data_per_layer_and_stays_bounded():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    model[0].requires_grad_(False)  # frozen on purpose: no series, no finding
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.01)
    steps = 2 * MAX_POINTS + 10

    def train():
        for _ in range(steps):
            loss = model(torch.randn(2, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    findings, watcher = run(train, sampler=EVERY_STEP)
    assert findings == [] and isinstance(watcher, GradHealth)
    assert list(watcher.series) == ["2"]
    points = watcher.series["2"]
    assert len(points) <= MAX_POINTS and points[0][0] == 0 and points[-1][0] == steps - 1
    assert all(isinstance(s, int) and isinstance(n, float) and math.isfinite(n) for s, n in points)
    assert [s for s, _ in points] == sorted(s for s, _ in points)


def test_two_models_with_the_same_layer_names_get_separate_series():
    findings, watcher = run(_gan_training)
    assert findings == []
    assert {"0", "2", "0 (optimizer 2)", "2 (optimizer 2)"} <= set(watcher.series)


def test_gradients_recovering_from_an_early_collapse_are_not_an_explosion():
    """A correct policy-gradient run: while every action earns the same reward the advantage is 0 and only
    a tiny entropy bonus is left (gradients 1000x smaller); then the rewards differ again and the
    gradients return to their earlier level. Not an explosion: nothing exceeds what the layers had."""
    def train():
        torch.manual_seed(0)
        policy = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 3))
        opt = torch.optim.SGD(policy.parameters(), lr=0.05)
        for step in range(30):
            states = torch.randn(64, 4)
            dist = torch.distributions.Categorical(logits=policy(states))
            actions = dist.sample()
            best = states[:, :3].argmax(dim=1)
            rewards = torch.ones(64) if 5 <= step < 15 else (actions == best).float()  # a phase where all pay
            advantage = rewards - rewards.mean()
            loss = -(advantage * dist.log_prob(actions)).mean() - 1e-4 * dist.entropy().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    findings, watcher = run(train, sampler=EVERY_STEP)
    assert [f.code for f in findings if f.code == "TP353"] == []
    norms = [n for _, n in watcher.series["2"]]
    assert max(norms[6:14]) * 100 < min(norms[16:])  # the collapse and the recovery did happen


# ------------------------------------------------------------------------------------------ gated layers
# Written before the checks were tuned for them (issue 31). A layer behind a zero-initialised gate (timm's
# zero_init_last residual BatchNorm, LoRA's B, ReZero) gets an exactly zero gradient while the gate is zero and
# tiny, growing ones while it opens: neither vanishing (nothing attenuates the signal on its way) nor exploding.
from tests.watch import _resolution_cases as cases  # noqa: E402


@pytest.mark.parametrize("seed, momentum, start_factor",
                         [(0, 0.9, 1e-4), (1, 0.0, 1e-4), (2, 0.9, 1e-3), (0, 0.0, 1e-2)])
def test_layers_behind_a_zero_initialised_residual_batchnorm_are_not_reported(seed, momentum, start_factor):
    _, train = cases.zero_init_resnet(seed, momentum=momentum, start_factor=start_factor, steps=60)
    findings, _ = run(train)
    assert codes(findings) == []


def test_a_gated_layer_is_judged_again_once_it_has_woken_up():
    """The layers behind the gate get exactly zero gradients at step 0; once the gate has opened their
    gradients are of the usual size and their series goes on."""
    _, train = cases.zero_init_resnet(0, start_factor=1.0, steps=30)
    findings, watcher = run(train, sampler=EVERY_STEP)
    assert codes(findings) == []
    series = watcher.series["3.conv1"]
    assert series[0] == (0, 0.0) and series[-1][1] > 0
    layer = next(layer for _, layout in watcher._layouts.values() for layer in layout.layers if layer.name == "3.conv1")
    assert not layer.gated and len(layer.history) > 0
