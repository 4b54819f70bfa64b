"""The loss_inputs watcher: probabilities vs logits into CE / NLL / BCE losses, and broadcasting targets."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.watch.util import codes, run_source, watched

WATCHERS = ["loss_inputs"]

HEAD = """
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 5))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(8):
    x, y = torch.randn(64, 16), torch.randint(0, 5, (64,))
    out = model(x)
"""
TAIL = """
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
LOSS_LINE = 9  # the line of `loss = ...` in HEAD + body + TAIL


def _run(tmp_path, body: str):
    out = run_source(tmp_path, HEAD + body + TAIL, WATCHERS)
    assert out.exit_code == 0, out.error
    return out


def _one(outcome, code):
    found = [f for f in outcome.findings if f.code == code]
    assert len(found) == 1, outcome.findings
    return found[0]


# ------------------------------------------------------------------------------------ TP301
def test_softmax_into_cross_entropy_module_is_tp301(tmp_path):
    out = _run(tmp_path, "    loss = nn.CrossEntropyLoss()(F.softmax(out, dim=1), y)")
    f = _one(out, "TP301")
    assert f.severity.value == "error" and f.subject == "CrossEntropyLoss"
    assert f.path.endswith("train.py") and f.line == LOSS_LINE
    assert "output of a softmax" in f.message and "logits" in f.fix
    assert codes(out.findings) == ["TP301"]


def test_softmax_into_functional_cross_entropy_inside_forward_is_tp301(tmp_path):
    # the loss computed in the model's forward, nanoGPT style, after a reshape
    out = run_source(tmp_path, """
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)

class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(16, 5)

    def forward(self, x, targets):
        probs = self.body(x).softmax(-1)
        return F.cross_entropy(probs.view(-1, 5), targets.view(-1))

model = Classifier()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(6):
    loss = model(torch.randn(4, 3, 16), torch.randint(0, 5, (4, 3)))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
""", WATCHERS)
    f = _one(out, "TP301")
    assert f.subject == "F.cross_entropy" and f.line == 12


def test_probabilities_by_value_into_cross_entropy_is_tp301(tmp_path):
    # exp(log_softmax) is a softmax the grad_fn does not show: the values give it away
    out = _run(tmp_path, "    loss = F.cross_entropy(torch.exp(F.log_softmax(out, 1)), y)")
    f = _one(out, "TP301")
    assert "every row sums to 1" in f.message


# ------------------------------------------------------------------------------------ TP357
def test_softmax_into_nll_loss_is_tp357_error(tmp_path):
    out = _run(tmp_path, "    loss = F.nll_loss(F.softmax(out, 1), y)")
    f = _one(out, "TP357")
    assert f.severity.value == "error" and "log_softmax" in f.fix


def test_logits_into_nll_loss_module_is_tp357_warning(tmp_path):
    out = _run(tmp_path, "    loss = nn.NLLLoss()(out, y)")
    f = _one(out, "TP357")
    assert f.severity.value == "warning" and f.subject == "NLLLoss"
    assert "raw scores" in f.message


# ------------------------------------------------------------------------------------ TP303
def test_sigmoid_into_bce_with_logits_is_tp303_error(tmp_path):
    out = _run(tmp_path, "    loss = nn.BCEWithLogitsLoss()(torch.sigmoid(out[:, 0]), (y > 2).float())")
    f = _one(out, "TP303")
    assert f.severity.value == "error" and "sigmoid(sigmoid(x))" in f.message


def test_model_ending_in_sigmoid_into_bce_with_logits_is_tp303_error(tmp_path):
    out = run_source(tmp_path, """
import torch, torch.nn as nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 1), nn.Sigmoid())
criterion = nn.BCEWithLogitsLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(6):
    x, y = torch.randn(32, 16), torch.randint(0, 2, (32, 1)).float()
    loss = criterion(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
""", WATCHERS)
    f = _one(out, "TP303")
    assert f.severity.value == "error" and f.line == 9


def test_probability_values_into_bce_with_logits_is_tp303_warning(tmp_path):
    # clamp hides the provenance; never a negative value in 64 x 5 calls is the evidence
    out = _run(tmp_path, "    loss = F.binary_cross_entropy_with_logits(out[:, 0].clamp(0, 1), (y > 2).float())")
    f = _one(out, "TP303")
    assert f.severity.value == "warning" and "look like probabilities" in f.message


def test_saturated_sigmoid_into_bce_is_tp303_error(tmp_path):
    out = _run(tmp_path, "    loss = F.binary_cross_entropy(torch.sigmoid(out[:, 0] * 200), (y > 2).float())")
    f = _one(out, "TP303")
    assert f.severity.value == "error" and "saturated" in f.message


def test_sigmoid_into_bce_without_saturation_is_tp303_info(tmp_path):
    # the VAE and DCGAN of pytorch/examples train correctly this way: advice, not a warning
    out = _run(tmp_path, "    loss = nn.BCELoss()(torch.sigmoid(out[:, 0]), (y > 2).float())")
    f = _one(out, "TP303")
    assert f.severity.value == "info" and f.subject == "BCELoss"


# An untrained critic's logits can all lie in [0, 1] for its first calls (bench/trainscripts' GAN: [0.04, 0.08]
# over 4 calls): the last layers below are set so they do, before any step.
GAN = """
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
maker = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
{critic}
with torch.no_grad():
    last = [m for m in critic.modules() if isinstance(m, (nn.Linear, nn.Conv1d))][-1]
    last.weight.uniform_(0.0, 0.002)
    if last.bias is not None:
        last.bias.fill_(0.05)
judge = nn.BCEWithLogitsLoss()
opt_m = torch.optim.Adam(maker.parameters(), lr=1e-4)
opt_c = torch.optim.Adam(critic.parameters(), lr=1e-4)
ones, zeros = torch.ones(64, 1), torch.zeros(64, 1)
for step in range(6):
    real, made = torch.randn(64, 2) + 2, maker(torch.randn(64, 4))
    opt_c.zero_grad()
    critic_loss = {loss_real} + {loss_fake}
    critic_loss.backward()
    opt_c.step()
    opt_m.zero_grad()
    {loss_maker}.backward()
    opt_m.step()
"""
MLP_CRITIC = "critic = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 1))"


@pytest.mark.parametrize("critic, loss", [
    (MLP_CRITIC, "judge(critic({x}), {y})"),  # the module, a Linear's output (AddmmBackward0)
    (MLP_CRITIC, "F.binary_cross_entropy_with_logits(target={y}, input=critic({x}).squeeze(1).unsqueeze(1))"),
    ("critic = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 1, bias=False))",  # MmBackward0
     "judge(critic({x}).view(-1), {y}.view(-1))"),
    ("critic = nn.Sequential(nn.Unflatten(1, (1, 2)), nn.Conv1d(1, 1, 2), nn.Flatten())",  # ConvolutionBackward0
     "F.binary_cross_entropy_with_logits(critic({x}), {y})"),
])
def test_an_untrained_critics_logits_in_0_1_are_not_probabilities(tmp_path, critic, loss):
    source = GAN.format(critic=critic, loss_real=loss.format(x="real", y="ones"),
                        loss_fake=loss.format(x="made.detach()", y="zeros"),
                        loss_maker=loss.format(x="made", y="ones"))
    out = run_source(tmp_path, source, WATCHERS)
    assert out.exit_code == 0 and out.steps == 6, out.error
    assert codes(out.findings) == [], out.findings


@pytest.mark.parametrize("critic, loss, severity", [
    (MLP_CRITIC + "\ncritic.append(nn.Sigmoid())", "judge(critic({x}), {y})", "error"),
    (MLP_CRITIC, "judge(torch.sigmoid(critic({x})).clamp(1e-6, 1 - 1e-6), {y})", "warning"),  # clamp hides it
    (MLP_CRITIC, "F.binary_cross_entropy_with_logits(critic({x}).softmax(0), {y})", "error"),
])
def test_a_critics_probabilities_into_bce_with_logits_still_fire(tmp_path, critic, loss, severity):
    source = GAN.format(critic=critic, loss_real=loss.format(x="real", y="ones"),
                        loss_fake=loss.format(x="made.detach()", y="zeros"),
                        loss_maker=loss.format(x="made", y="ones"))
    out = run_source(tmp_path, source, WATCHERS)
    assert out.exit_code == 0, out.error
    assert {f.code for f in out.findings} == {"TP303"} and {f.severity.value for f in out.findings} == {severity}


def test_probabilities_computed_without_grad_into_bce_with_logits_still_fire(tmp_path):
    # no grad_fn says nothing of the origin: the values are the evidence
    out = _run(tmp_path, """    with torch.no_grad():
        probs = torch.sigmoid(model(x)[:, 0])
    F.binary_cross_entropy_with_logits(probs, (y > 2).float())
    loss = F.cross_entropy(out, y)""")
    f = _one(out, "TP303")
    assert f.severity.value == "warning" and "look like probabilities" in f.message


# ------------------------------------------------------------------------------------ TP355
def test_regression_head_against_1d_target_is_tp355(tmp_path):
    out = _run(tmp_path, "    loss = nn.MSELoss()(out[:, :1], y.float())")
    f = _one(out, "TP355")
    assert f.severity.value == "error"
    assert "[64, 1]" in f.message and "[64, 64]" in f.message and "only warns" in f.message
    assert "view_as" in f.fix


def test_silent_broadcast_in_functional_loss_is_tp355(tmp_path):
    out = _run(tmp_path, "    loss = F.poisson_nll_loss(out[:, 0], y.float()[:, None])")
    f = _one(out, "TP355")
    assert f.subject == "F.poisson_nll_loss" and "silently" in f.message


def test_torch_2_13_warns_only_for_some_losses():
    """The doc's claim: MSE/L1/SmoothL1/Huber warn, KLDiv/PoissonNLL/... broadcast silently."""
    pred, target = torch.rand(4, 1), torch.rand(4)

    def kl_div(p, t):
        return F.kl_div(p, t, reduction="batchmean")  # "mean" would warn about itself
    for fn, warns in ((F.mse_loss, True), (F.l1_loss, True), (F.smooth_l1_loss, True), (F.huber_loss, True),
                      (kl_div, False), (F.poisson_nll_loss, False), (F.hinge_embedding_loss, False),
                      (F.multilabel_soft_margin_loss, False)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert fn(pred, target).numel() == 1
        assert bool(caught) == warns, fn.__name__
    with pytest.raises(ValueError):
        F.binary_cross_entropy(pred, target)
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        F.binary_cross_entropy(torch.tensor([2.0]), torch.tensor([1.0]))


# ------------------------------------------------------------------------------------ clean loops
def test_correct_losses_are_silent(tmp_path):
    out = _run(tmp_path, """
    logp = F.log_softmax(out, 1)
    loss = (F.cross_entropy(out, y) + nn.CrossEntropyLoss(label_smoothing=0.1)(out, y) + F.nll_loss(logp, y)
            + nn.NLLLoss()(torch.log(F.softmax(out, 1)), y)
            + nn.BCEWithLogitsLoss()(out[:, 0], (y > 2).float())
            + F.binary_cross_entropy(F.softmax(out, 1)[:, 1], (y == 1).float())
            + F.mse_loss(out[:, 0], y.float()) + nn.L1Loss()(out, torch.zeros(64, 5))
            + F.cross_entropy(out, F.softmax(out.detach() * 2, 1))        # soft targets
            + F.kl_div(logp, torch.full((5,), 0.2), reduction="batchmean"))
    with torch.no_grad():
        accuracy = (F.softmax(out, 1).argmax(1) == y).float().mean()""")
    assert out.findings == []


def test_cnn_with_accumulation_clipping_scheduler_and_eval_is_silent():
    def train():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
        criterion = nn.CrossEntropyLoss()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
        for step in range(12):
            opt.zero_grad()
            for _micro in range(2):
                loss = criterion(model(torch.randn(4, 3, 8, 8)), torch.randint(0, 10, (4,)))
                (loss / 2).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if step % 4 == 0:
                model.eval()
                with torch.no_grad():
                    criterion(model(torch.randn(4, 3, 8, 8)), torch.randint(0, 10, (4,)))
                model.train()

    assert watched(train, WATCHERS) == []


def test_transformer_with_frozen_embedding_two_optimizers_and_multilabel_head_is_silent():
    def train():
        torch.manual_seed(0)
        emb = nn.Embedding(50, 32).requires_grad_(False)
        encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True), 2)
        lm_head, tag_head = nn.Linear(32, 50), nn.Linear(32, 3)
        opt_a = torch.optim.AdamW(list(encoder.parameters()) + list(lm_head.parameters()), lr=1e-3)
        opt_b = torch.optim.SGD(tag_head.parameters(), lr=1e-2)
        for _step in range(8):
            tokens = torch.randint(0, 50, (4, 12))
            h = encoder(emb(tokens))
            loss = F.cross_entropy(lm_head(h).flatten(0, 1), tokens.flatten(), ignore_index=0)
            loss = loss + nn.BCEWithLogitsLoss()(tag_head(h[:, 0]), torch.randint(0, 2, (4, 3)).float())
            opt_a.zero_grad()
            opt_b.zero_grad()
            loss.backward()
            opt_a.step()
            opt_b.step()

    assert watched(train, WATCHERS) == []


# ------------------------------------------------------------------------------------ observing only
def _transformer_run():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    head = nn.Linear(16, 4)
    opt = torch.optim.Adam(list(layer.parameters()) + list(head.parameters()), lr=1e-2)
    evals = []
    for _step in range(8):
        x = torch.randn(4, 6, 16)
        loss = F.cross_entropy(head(layer(x)[:, 0]), torch.randint(0, 4, (4,)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        layer.eval()
        with torch.no_grad():  # inference: torch's fast path, which any active mode would switch off
            evals.append(layer(x).clone())
        layer.train()
    return [p.detach().clone() for p in layer.parameters()], evals


def test_training_and_inference_fast_path_are_bit_for_bit_identical_under_the_watcher():
    plain = _transformer_run()
    result = []
    watched(lambda: result.append(_transformer_run()), WATCHERS)
    params, evals = result[0]
    assert all(torch.equal(a, b) for a, b in zip(plain[0], params, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(plain[1], evals, strict=True))


def test_the_scripts_own_function_modes_see_every_call_and_stay_as_they_were():
    from torch.overrides import TorchFunctionMode

    class Counting(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.losses = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.losses += func is F.cross_entropy
            return func(*args, **(kwargs or {}))

    outer = Counting()

    def train():
        model = nn.Linear(4, 3)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        inner = Counting()
        with inner:
            for _step in range(7):
                loss = F.cross_entropy(F.softmax(model(torch.randn(5, 4)), 1), torch.randint(0, 3, (5,)))
                opt.zero_grad()
                loss.backward()
                opt.step()
            assert torch._C._len_torch_function_stack() == 2
            assert torch._C._get_function_stack_at(1) is inner
        assert inner.losses == 7  # torch's own F.cross_entropy, called once per step through the wrapper

    with outer:
        findings = watched(train, WATCHERS)
        assert torch._C._len_torch_function_stack() == 1
        assert torch._C._get_function_stack_at(0) is outer
    assert torch._C._len_torch_function_stack() == 0
    assert codes(findings) == ["TP301"]


def test_set_default_device_inside_the_session_keeps_working():
    def train():
        torch.set_default_device("cpu")
        try:
            model = nn.Linear(4, 3)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for _step in range(7):
                loss = F.cross_entropy(model(torch.randn(5, 4)), torch.randint(0, 3, (5,)))
                opt.zero_grad()
                loss.backward()
                opt.step()
        finally:
            torch.set_default_device(None)

    assert watched(train, WATCHERS) == []
    assert torch._C._len_torch_function_stack() == 0


def test_checks_have_complete_docs():
    from torchpact.watch.watchers.loss_inputs import LossInputsWatcher

    assert sorted(c.code for c in LossInputsWatcher.checks) == ["TP301", "TP303", "TP355", "TP357"]
    for check in LossInputsWatcher.checks:
        for section in ("## What it does", "## Why is this bad?", "## How to fix"):
            assert section in check.doc, (check.code, section)


def test_bf16_autocast_with_grad_scaler_is_silent_and_identical():
    def train():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 7))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        scaler = torch.amp.GradScaler("cpu")
        for _step in range(8):
            x, y = torch.randn(32, 16), torch.randint(0, 7, (32,))
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(x)
                loss = F.cross_entropy(logits, y) + nn.NLLLoss()(F.log_softmax(logits.float(), 1), y)
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return [p.detach().clone() for p in model.parameters()]

    plain = train()
    result = []
    assert watched(lambda: result.append(train()), WATCHERS) == []
    assert all(torch.equal(a, b) for a, b in zip(plain, result[0], strict=True))


class _ProbabilitiesIntoCrossEntropy(torch.utils.data.Dataset):
    """Computes a loss in the worker, with the mistake TP301 reports: the worker's wrapper only passes through."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        x = torch.randn(4)
        return F.cross_entropy(F.softmax(torch.randn(2, 3), 1), torch.tensor([0, 1])), x


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_forked_dataloader_workers_only_pass_through_the_wrappers():
    def train():
        model = nn.Linear(4, 3)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = torch.utils.data.DataLoader(_ProbabilitiesIntoCrossEntropy(), batch_size=4, num_workers=2,
                                             multiprocessing_context="fork")
        for worker_loss, x in loader:
            assert torch.isfinite(worker_loss).all()
            loss = F.cross_entropy(model(x), torch.randint(0, 3, (4,)))
            opt.zero_grad()
            loss.backward()
            opt.step()

    assert watched(train, WATCHERS) == []


def test_a_step_of_many_torch_calls_is_checked_without_any_function_mode():
    # an RL-style step (thousands of tiny torch calls before the loss): only the loss call meets torchpact
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    depths: list[int] = []

    def train():
        for _ in range(3):
            depths.append(torch._C._len_torch_function_stack())
            h = torch.zeros(2, 4)
            for _ in range(5000):
                h = h + 0.001  # one torch call each
            loss = F.cross_entropy(F.softmax(model(h), dim=1), torch.tensor([0, 1]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    found = watched(train, WATCHERS)
    assert codes(found) == ["TP301"]
    assert depths == [0, 0, 0]


def test_functional_losses_are_checked_on_every_sampled_step_and_on_no_other():
    # the mistake appears at step 25 only: seen on the sampled step 30, not on the unsampled 25-29
    from torchpact.watch import Sampler

    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    original = F.cross_entropy

    def train():
        for step in range(32):
            logits = model(torch.randn(2, 4))
            loss = F.cross_entropy(F.softmax(logits, dim=1) if step >= 25 else logits, torch.tensor([0, 1]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    [found] = watched(train, WATCHERS, sampler=Sampler(first=1, every=10))
    assert found.code == "TP301" and found.step == 30
    assert F.cross_entropy is original  # the wrappers are gone after the session
