"""Runtime TP456: trained parameters written outside optimizer.step()."""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import nn

from tests.watch.util import codes, watched


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))

    def _init_weights(self, module):  # transformers-style: tensor methods, not nn.init
        if isinstance(module, nn.Linear):
            module.weight.data.normal_(mean=0.0, std=0.02)
            module.bias.data.zero_()


def _batch():
    return torch.randn(16, 8), torch.randint(0, 3, (16,))


def _step(model, opt):
    x, y = _batch()
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def test_init_weights_applied_again_to_a_trained_model_names_the_apply_line():
    torch.manual_seed(0)
    model = Net()

    def run():
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        for step in range(12):
            _step(model, opt)
            if step == 6:
                trained = model.head.weight.clone()
                model.apply(model._init_weights)  # the bug: post_init() once more on a trained model
                assert not torch.equal(trained, model.head.weight)  # the consequence: learning thrown away
    findings = watched(run, ["out_of_step"])
    [f] = [f for f in findings if f.code == "TP456"]
    assert "Net.apply(Net._init_weights)" in f.message and "`body`" in f.message and "`head`" in f.message
    assert f.severity.value == "warning" and f.path.endswith("test_out_of_step.py")


def test_nn_init_on_a_trained_parameter_is_reported_at_the_call():
    torch.manual_seed(0)
    model = Net()

    def run():
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(6):
            _step(model, opt)
            if step == 3:
                nn.init.xavier_uniform_(model.body.weight)
    [f] = [f for f in watched(run, ["out_of_step"]) if f.code == "TP456"]
    assert "torch.nn.init.xavier_uniform_" in f.message and "`body`" in f.message


def test_a_copy_into_the_trained_network_every_iteration_is_traced_to_its_line():
    torch.manual_seed(0)
    online = Net()
    target = copy.deepcopy(online)

    def run():
        opt = torch.optim.Adam(online.parameters(), lr=1e-2)
        for _ in range(8):
            _step(online, opt)
            with torch.no_grad():
                for p, tp in zip(online.parameters(), target.parameters(), strict=True):
                    p.data.copy_(tp.data)  # the bug: the target-network sync goes the wrong way
    found = [f for f in watched(run, ["out_of_step"]) if f.code == "TP456"]
    assert [f.severity.value for f in found] == ["warning"]
    assert "Tensor.copy_ at test_out_of_step.py:" in found[0].message and found[0].line is not None
    assert torch.equal(online.head.weight, target.head.weight)  # the consequence: it never learns


def test_a_one_off_overwrite_by_an_unseen_writer_is_info():
    torch.manual_seed(0)
    model = Net()

    def run():
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(8):
            _step(model, opt)
            if step == 4:
                with torch.no_grad():
                    model.head.weight.mul_(0.0)  # once: gone before the spy is armed
    [f] = [f for f in watched(run, ["out_of_step"]) if f.code == "TP456"]
    assert f.severity.value == "info" and "`head`" in f.message and "between optimizer steps 4 and 5" in f.message


def test_deliberate_writes_and_other_models_are_silent():
    torch.manual_seed(0)
    critic, ema = Net(), Net()
    best = copy.deepcopy(critic.state_dict())

    def run():
        opt = torch.optim.RMSprop(critic.parameters(), lr=5e-3)
        for step in range(25):
            x, y = _batch()
            opt.zero_grad()
            nn.functional.cross_entropy(critic(x), y).backward()
            nn.utils.clip_grad_norm_(critic.parameters(), 1.0)
            opt.step()
            with torch.no_grad():
                for p in critic.parameters():
                    p.clamp_(-0.05, 0.05)  # WGAN weight clipping
                for e, p in zip(ema.parameters(), critic.parameters(), strict=True):
                    e.mul_(0.9).add_(p, alpha=0.1)  # EMA model: in no optimizer
            if step == 12:
                critic.load_state_dict(best)  # roll back to a checkpoint
            ema.apply(lambda m: None)
    assert codes(watched(run, ["out_of_step"])) == []


def test_a_run_whose_weights_turned_nan_is_silent():
    """NaN weights give NaN checksums, which never equal themselves: without a NaN-aware comparison
    every sampled step looked changed, and the armed detector then took zero_grad()'s `p.grad = None`
    for a `.data = ...` write."""
    torch.manual_seed(0)
    model = Net()

    def run():
        opt = torch.optim.SGD(model.parameters(), lr=1e4)
        for _ in range(12):
            _step(model, opt)
    findings = watched(run, ["out_of_step"])
    assert all(torch.isnan(p).any() for p in model.parameters())  # the run really diverged
    assert codes(findings) == []


def test_setting_grad_to_none_is_not_a_write_and_the_real_writer_is_named():
    torch.manual_seed(0)
    model = Net()

    def run():
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(8):
            x, y = _batch()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()  # sets every p.grad = None, before the write below
            model.head.weight.data = torch.zeros_like(model.head.weight)  # the bug
    [f] = [f for f in watched(run, ["out_of_step"]) if f.code == "TP456"]
    assert "`.data = ...` at test_out_of_step.py:" in f.message
    assert f.line is not None and "torch.zeros_like" in Path(__file__).read_text().splitlines()[f.line - 1]


def test_the_checksum_sees_each_kind_of_write_and_keeps_nan_weights_unchanged():
    from torchpact.watch.watchers.out_of_step import OutOfStep

    def changed(write, *params):
        before = OutOfStep._checksum(list(params))
        write()
        return [not same for same in OutOfStep._same(before, OutOfStep._checksum(list(params)))]

    w, b, empty = torch.randn(4, 3), torch.randn(3), torch.zeros(0)
    assert changed(lambda: None, w, b, empty) == [False, False, False]
    assert changed(lambda: w.normal_(), w, b, empty) == [True, False, False]
    assert changed(lambda: b.neg_(), w, b, empty) == [False, True, False]  # the same norm, another max
    assert changed(lambda: w.mul_((torch.rand(4, 3) > 0.5).float()), w, b) == [True, False]
    nan = torch.tensor([float("nan"), 1.0])
    assert changed(lambda: None, nan) == [False]
    assert changed(lambda: nan.fill_(float("nan")), nan) == [False]  # NaN stays NaN: no new write to name
    half = torch.tensor([1.0, -2.0], dtype=torch.bfloat16)
    assert changed(lambda: half.mul_(4), half, b) == [True, False]
    z = torch.tensor([1 + 2j, -3 + 0.5j])
    assert changed(lambda: z.copy_(z.conj()), z, b) == [True, False]  # the same norm, the imaginary parts negated


# ---------------------------------------------------------------------------------------- variants
# Written before the watcher was tuned for them (issue 31). The contract: parameters an optimizer has trained
# for at least one step are overwritten in place outside any optimizer step by an initialiser (nn.init, the
# tensor's own normal_/uniform_/fill_/zero_, copy_) and the next step then trains from the overwritten values.
import pytest  # noqa: E402

UNSAMPLED = 25   # with the default sampler (every step up to 10, then every 20th), step 25 is not sampled


def _reinit_loop(model):
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)


def _fill_loop(model):
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            p.data.zero_()
        else:
            p.data.fill_(0.01)


def _copy_loop(model):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.02)


REINITS = {
    "apply(init_fn)": lambda model: model.apply(model._init_weights),
    "loop with normal_": _reinit_loop,
    "loop with .data.fill_/zero_": _fill_loop,
    "loop with copy_": _copy_loop,
    "direct nn.init.normal_": lambda model: nn.init.normal_(model.head.weight, std=0.02),
    "reset_parameters()": lambda model: model.head.reset_parameters(),
    "uniform_ on one weight": lambda model: model.body.weight.data.uniform_(-0.1, 0.1),
}


def _train_with(write, steps=30, at=UNSAMPLED, new_optimizer=False):
    torch.manual_seed(0)
    model = Net()
    state = {}

    def run():
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for step in range(steps):
            _step(model, opt)
            if step == at:
                state["trained"] = model.head.weight.detach().clone()
                write(model)
                state["written"] = model.head.weight.detach().clone()
                if new_optimizer:
                    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return watched(run, ["out_of_step"]), state


@pytest.mark.parametrize("form", list(REINITS))
def test_a_reinitialisation_of_trained_weights_that_training_continues_from_warns(form):
    findings, state = _train_with(REINITS[form])
    assert not torch.equal(state["trained"], state["written"]) or form == "uniform_ on one weight"
    found = [f for f in findings if f.code == "TP456"]  # one per line that wrote
    assert found and all(f.severity.value == "warning" and f.path.endswith("test_out_of_step.py") for f in found)
    assert all(f.line is not None and "after 26 optimizer steps" in f.message for f in found)


@pytest.mark.parametrize("form", ["loop with normal_", "direct nn.init.normal_", "apply(init_fn)"])
def test_the_same_writes_before_training_or_after_the_last_step_are_silent(form):
    before, _ = _train_with(REINITS[form], at=-1)  # (never: the model is initialised before training only)
    assert codes(before) == []
    after, _ = _train_with(REINITS[form], steps=UNSAMPLED + 1)  # the last step, then the write: nothing trains on it
    assert codes(after) == []


@pytest.mark.parametrize("form", ["loop with normal_", "apply(init_fn)"])
def test_a_reset_with_a_fresh_optimizer_is_info(form):
    findings, _ = _train_with(REINITS[form], new_optimizer=True)
    assert [(f.code, f.severity.value) for f in findings] == [("TP456", "info")]


def test_ema_weights_swapped_in_for_validation_and_restored_are_silent():
    """diffusers' EMAModel.store / copy_to / restore: copy_ into the trained weights, and back before training."""
    torch.manual_seed(0)
    model = Net()
    shadow = [p.detach().clone() for p in model.parameters()]

    def run():
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        for step in range(30):
            _step(model, opt)
            with torch.no_grad():
                for s, p in zip(shadow, model.parameters(), strict=True):
                    s.lerp_(p, 0.1)
            if step % 8 == 7:
                backup = [p.detach().clone() for p in model.parameters()]
                with torch.no_grad():
                    for s, p in zip(shadow, model.parameters(), strict=True):
                        p.copy_(s)  # evaluate with the EMA weights
                    model(torch.randn(4, 8))
                    for b, p in zip(backup, model.parameters(), strict=True):
                        p.data.copy_(b)  # and put the trained ones back
    assert codes(watched(run, ["out_of_step"])) == []
