"""mode: TP402 (the optimizer trains a model left in eval mode), TP453 (validation in train mode)."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

from tests.watch.util import codes, run_source, watched

WATCHER = ["mode"]


def _net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3))


def _batch():
    return torch.randn(8, 8), torch.randint(0, 3, (8,))


def _validate(model: nn.Module, batches: int = 3) -> None:
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn(8, 8))


def _train_steps(model: nn.Module, opt: torch.optim.Optimizer, steps: int = 4) -> None:
    for _ in range(steps):
        x, y = _batch()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def _line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


# ---------------------------------------------------------------------------------------- TP402
def test_eval_left_on_after_validation():
    def run():
        model = _net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _epoch in range(3):
            for _ in range(3):
                x, y = _batch()
                opt.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
            model.eval()  # validation, and model.train() is never called again
            _validate(model)

    found = watched(run, WATCHER)
    assert codes(found) == ["TP402"]
    f = found[0]
    assert f.subject == "model" and "1 BatchNorm layer (`1`)" in f.message and "1 Dropout layer (`3`)" in f.message
    assert "dropout is off" in f.message
    assert f.line == _line_of(run, "loss = F.cross_entropy(model(x), y)")


def test_eval_mode_really_changes_training():
    """What TP402 says torch does: in eval mode dropout is the identity and BatchNorm stops updating."""
    model = _net().eval()
    x = torch.randn(8, 8)
    before = model[1].running_mean.clone()
    assert torch.equal(model[3](x), x)
    model(x).sum().backward()
    assert torch.equal(before, model[1].running_mean)


# ---------------------------------------------------------------------------------------- TP453
def test_validation_without_eval_and_its_consequence():
    def run():
        model = _net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _epoch in range(2):
            model.train()
            _train_steps(model, opt)
            stats = model[1].running_mean.clone()
            with torch.no_grad():
                for _ in range(3):
                    model(torch.randn(8, 8) + 5.0)  # validation data, model still in train mode
            assert not torch.equal(stats, model[1].running_mean)  # validation overwrote BatchNorm statistics

    found = watched(run, WATCHER)
    assert codes(found) == ["TP453"]
    f = found[0]
    assert f.subject == "model" and "running statistics" in f.message
    assert f.line == _line_of(run, "model(torch.randn(8, 8) + 5.0)")


def test_sanity_validation_before_the_first_step():
    def run():
        model = _net()
        _validate(model, batches=2)  # before any optimizer exists
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        _train_steps(model, opt)

    assert codes(watched(run, WATCHER)) == ["TP453"]


def test_transformer_validation_in_train_mode_names_attention_dropout(tmp_path):
    outcome = run_source(tmp_path, """
        import torch, torch.nn as nn

        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True)
        model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for step in range(3):
            loss = model(torch.randn(4, 5, 16)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.inference_mode():
            for _ in range(2):
                out = model(torch.randn(4, 5, 16))
    """, watchers=WATCHER)
    assert outcome.exit_code == 0 and codes(outcome.findings) == ["TP453"]
    f = outcome.findings[0]
    assert f.line == 14 and f.path.endswith("train.py")
    assert "2 MultiheadAttention layers with dropout" in f.message and "inference_mode()" in f.message
    assert "Dropout layers" in f.message


# ---------------------------------------------------------------------------------------- clean loops
def test_usual_train_eval_train_pattern_is_silent():
    def run():
        model = _net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, 2)
        for _epoch in range(3):
            model.train()
            _train_steps(model, opt)
            sched.step()
            model.eval()
            _validate(model)
        model.train()

    assert watched(run, WATCHER) == []


def test_validation_between_steps_then_back_to_train_is_silent():
    def run():
        model = _net()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for i in range(12):
            x, y = _batch()
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            if i % 4 == 3:  # evaluate mid-step, with grad still on, then resume
                model.eval()
                model(torch.randn(4, 8)).sum()
                model.train()
            opt.step()

    assert watched(run, WATCHER) == []


def test_models_without_dropout_or_batchnorm_never_trigger():
    def run():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.Dropout(0.0), nn.Linear(16, 3),
                              nn.BatchNorm1d(3, track_running_stats=False))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        _train_steps(model, opt)
        _validate(model)          # no eval(): both modes compute the same here
        model.eval()
        _train_steps(model, opt)  # and eval mode sticks: still the same computation

    assert watched(run, WATCHER) == []


def test_teacher_ema_frozen_batchnorm_and_update_bn_are_silent():
    def run():
        student, teacher = _net(), _net()
        opt = torch.optim.SGD(student.parameters(), lr=0.1)
        ema = torch.optim.swa_utils.AveragedModel(student)
        student[1].eval()  # BatchNorm frozen on purpose while the model trains
        for _ in range(6):
            x, _y = _batch()
            with torch.no_grad():
                target = teacher(x)  # a teacher in train mode, trained by no optimizer
                target = teacher(x) + target
            opt.zero_grad()
            F.mse_loss(student(x), target).backward()
            opt.step()
            ema.update_parameters(student)
        torch.optim.swa_utils.update_bn([torch.randn(8, 8) for _ in range(3)], student)

    assert watched(run, WATCHER) == []


def test_single_no_grad_sample_and_reentrant_checkpoint_are_silent(recwarn):
    def run():
        torch.manual_seed(0)
        G = nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 8))
        opt = torch.optim.Adam(G.parameters(), lr=1e-3)
        fixed = torch.randn(8, 4)
        for i in range(6):
            z = torch.randn(8, 4, requires_grad=True)
            opt.zero_grad()
            torch.utils.checkpoint.checkpoint(G, z, use_reentrant=True).pow(2).mean().backward()
            opt.step()
            if i % 2 == 0:
                with torch.no_grad():  # DCGAN-style progress sample: one call, generator always in train mode
                    G(fixed)

    assert watched(run, WATCHER) == []


def test_training_is_bitwise_identical_under_the_watcher():
    def train(model):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        torch.manual_seed(2)
        for _ in range(2):
            model.train()
            _train_steps(model, opt, 3)
            _validate(model)

    plain, observed = _net(), _net()
    train(plain)
    watched(lambda: train(observed), WATCHER)
    for (name, a), b in zip(plain.state_dict().items(), observed.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


# ---------------------------------------------------------------------------------------- TP453 variants
# Written before the watcher was tuned for them (issue 31): a model with dropout and no BatchNorm, never put
# in eval(), evaluated under no_grad between its training steps — one full-batch call, as graph and
# small-data scripts do. The contract: a no-grad forward of a model an optimizer trains, made while that
# model is in train mode, during which dropout is active, is an evaluation that randomly drops units.
class DropNet(nn.Module):
    """Dropout in one of several forms, no BatchNorm."""

    def __init__(self, form: str):
        super().__init__()
        self.a, self.b = nn.Linear(8, 32), nn.Linear(32, 3)
        self.drop = nn.Dropout(0.5)
        self.form = form

    def forward(self, x):
        h = torch.relu(self.a(x))
        if self.form == "module":
            h = self.drop(h)
        elif self.form == "functional":
            h = F.dropout(h, 0.5, training=self.training)
        elif self.form == "sdpa":
            q = h[:, None, :]
            h = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5 if self.training else 0.0)[:, 0]
        elif self.form == "helper":
            h = _drop_if_training(self, h)
        return self.b(h)


def _drop_if_training(module, h):
    return torch.dropout(h, 0.5, module.training)


def _fit_and_validate(model, *, epochs=3, call_eval=False, context=torch.no_grad, when="between"):
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    X, Y = torch.randn(64, 8), torch.randint(0, 3, (64,))
    accuracies = []

    def validate():
        if call_eval:
            model.eval()
        with context():
            accuracies.append((model(X).argmax(1) == Y).float().mean().item())  # one full-batch call
        model.train()

    if when == "before":
        validate()
    for _epoch in range(epochs):
        for i in range(0, 64, 16):
            opt.zero_grad()
            F.cross_entropy(model(X[i:i + 16]), Y[i:i + 16]).backward()
            opt.step()
        if when == "between":
            validate()
    if when == "after":
        validate()
    return accuracies


@pytest.mark.parametrize("form", ["module", "functional", "sdpa", "helper"])
def test_single_no_grad_validation_pass_with_dropout_warns(form):
    findings = watched(lambda: _fit_and_validate(DropNet(form)), WATCHER)
    [f] = [f for f in findings if f.code == "TP453"]
    assert f.severity.value == "warning" and "dropout" in f.message
    assert f.line == _line_of(_fit_and_validate, "accuracies.append(")


def test_inference_mode_validation_with_dropout_warns():
    findings = watched(lambda: _fit_and_validate(DropNet("functional"), context=torch.inference_mode), WATCHER)
    assert [(f.code, f.severity.value) for f in findings] == [("TP453", "warning")]
    assert "inference_mode()" in findings[0].message


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_single_dropout_pass_outside_the_training_steps_is_info(when):
    findings = watched(lambda: _fit_and_validate(DropNet("module"), when=when), WATCHER)
    assert [(f.code, f.severity.value) for f in findings] == [("TP453", "info")]


def test_dropout_really_makes_the_no_grad_pass_random():
    model = DropNet("functional")
    x = torch.randn(16, 8)
    with torch.no_grad():
        assert not torch.equal(model(x), model(x))  # train mode: what TP453 says torch does
        model.eval()
        assert torch.equal(model(x), model(x))


@pytest.mark.parametrize("form", ["module", "functional", "sdpa", "helper"])
def test_the_same_validation_after_eval_is_silent(form):
    assert watched(lambda: _fit_and_validate(DropNet(form), call_eval=True), WATCHER) == []


def test_no_grad_calls_without_active_dropout_are_silent():
    """RL rollouts of a dropout-free policy, a teacher no optimizer trains, MC dropout after eval()."""
    def rollouts():
        torch.manual_seed(0)
        policy = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
        opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
        for _episode in range(3):
            with torch.no_grad():
                for _ in range(5):
                    policy(torch.randn(1, 4))  # acting: many calls, no dropout
            opt.zero_grad()
            policy(torch.randn(5, 4)).pow(2).mean().backward()
            opt.step()

    def teacher_and_mc_dropout():
        torch.manual_seed(0)
        student, teacher = DropNet("module"), DropNet("functional")
        opt = torch.optim.SGD(student.parameters(), lr=0.1)
        for _ in range(4):
            x = torch.randn(8, 8)
            with torch.no_grad():
                target = teacher(x)  # a teacher in train mode: no optimizer trains it
            opt.zero_grad()
            F.mse_loss(student(x), target).backward()
            opt.step()
        student.eval()
        student.drop.train()  # Monte-Carlo dropout on purpose: the model itself is in eval mode
        with torch.no_grad():
            torch.stack([student(torch.randn(8, 8)) for _ in range(4)])

    def no_dropout_in_this_pass():
        model = DropNet("none")  # a Dropout module that forward never calls
        _fit_and_validate(model)

    for run in (rollouts, teacher_and_mc_dropout, no_dropout_in_this_pass):
        assert watched(run, WATCHER) == [], run.__name__


def test_a_sanity_check_before_training_does_not_hide_the_validation_passes_after_it():
    def run():
        model = DropNet("module")
        torch.manual_seed(0)
        with torch.no_grad():
            model(torch.randn(64, 8))  # before the first step: info on its own
        _fit_and_validate(model)       # then evaluated between the training steps, still in train mode

    assert [(f.code, f.severity.value) for f in watched(run, WATCHER)] == [("TP453", "warning")]
