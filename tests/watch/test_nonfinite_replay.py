"""nonfinite: a NaN/inf first produced on an unsampled step is located by replaying that step before the update.

Step 50 is unsampled under the default Sampler (every step up to 9, then every 20th): the modules of that step
are not recorded, only its outermost calls are kept, and the check of its gradients sees the NaN/inf. Real
training loops throughout; the NaN arises from the data of step 50 (or from dropout's draw), not from a flag.
"""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.watch.util import codes, watched
from torchpact.watch import Sampler

WATCHER = ["nonfinite"]
NAN_STEP = 50


def only(findings, code):
    return [f for f in findings if f.code == code]


def _line_of(fn, text):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


# ------------------------------------------------------------------------------------------ models
class LogFeatures(nn.Module):
    def forward(self, x):
        return torch.log(x)  # a negative feature gives NaN


class RowNorm(nn.Module):
    """Appends each row's Euclidean norm: finite at an all-zero row, but its derivative there is not."""

    def forward(self, h):
        return torch.cat([h, torch.sqrt((h * h).sum(-1, keepdim=True))], -1)


def _log_net():
    return nn.Sequential(LogFeatures(), nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 1))


def _norm_net():
    return nn.Sequential(nn.Linear(4, 8, bias=False), RowNorm(), nn.Linear(9, 1))


def _positive_batch(step, nan_step=NAN_STEP):
    x = torch.rand(16, 4) + 0.5
    if step == nan_step:
        x[3, 2] = -1.0   # one corrupt sample
    return x, x.sum(-1, keepdim=True)


def _zero_row_batch(step, nan_step=NAN_STEP):
    x = torch.randn(16, 4)
    if step == nan_step:
        x[5] = 0.0       # an empty sample: the bias-free layer maps it to an all-zero row
    return x, x.sum(-1, keepdim=True)


def _train(model, batch, steps=NAN_STEP + 4, accumulate=1):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(steps):
        opt.zero_grad()
        for _ in range(accumulate):
            x, y = batch(step)
            loss = F.mse_loss(model(x), y) / accumulate
            loss.backward()
        opt.step()


# ------------------------------------------------------------------------------------------ forward
def test_forward_nan_on_an_unsampled_step_is_named_at_its_module_and_op():
    torch.manual_seed(0)
    findings = watched(lambda: _train(_log_net(), _positive_batch), WATCHER)
    (f,) = findings
    assert f.code == "TP351" and f.step == NAN_STEP and f.subject == "0"
    assert f.extra["op"] == "log" and f.extra["op_line"] == _line_of(LogFeatures.forward, "torch.log")
    assert f.extra["replay"] == "exact"
    assert ("step 50 was not recorded: this was seen in its replay before the update (1 model call on the same "
            "inputs, parameters and RNG state), whose outputs and gradients equal the step's bit for bit") in f.message


class AttentionPool(nn.Module):
    """Pools a padded sequence with attention: padding positions are masked with -inf before nn.Softmax."""

    def __init__(self):
        super().__init__()
        self.score = nn.Linear(8, 1)
        self.softmax = nn.Softmax(dim=1)

    def forward(self, x, keep):
        scores = self.score(x).squeeze(-1).masked_fill(~keep, float("-inf"))
        return (self.softmax(scores).unsqueeze(-1) * x).sum(1)


def test_forward_nan_from_a_built_in_module_is_named_at_that_module():
    """A sequence made of padding only at step 50: nn.Softmax over a row that is -inf everywhere is NaN."""
    torch.manual_seed(0)
    pool, head = AttentionPool(), nn.Linear(8, 1)
    opt = torch.optim.SGD([*pool.parameters(), *head.parameters()], lr=0.01)

    def train():
        for step in range(NAN_STEP + 2):
            x, lengths = torch.randn(4, 6, 8), torch.tensor([6, 3, 5, 2])
            if step == NAN_STEP:
                lengths[2] = 0
            keep = torch.arange(6)[None, :] < lengths[:, None]
            loss = head(pool(x, keep)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    (f,) = only(watched(train, WATCHER), "TP351")
    assert f.step == NAN_STEP and f.subject == "softmax"
    assert "from inputs without NaN/+inf (they hold -inf)" in f.message
    assert f.extra["op"] == "softmax" and f.extra["replay"] == "exact"
    assert "2 model calls" in f.message  # the pool's and the head's: both outermost calls


def test_a_model_called_with_keyword_arguments_is_replayed_with_them():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 1)

        def forward(self, x, *, scale=1.0):
            return self.lin(x) / scale  # a zero scale in the data: inf

    torch.manual_seed(0)
    model = Scaled()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def train():
        for step in range(NAN_STEP + 2):
            x = torch.randn(8, 4)
            scale = torch.full((8, 1), 2.0)
            if step == NAN_STEP:
                scale[1] = 0.0
            loss = model(x, scale=scale).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    (f,) = only(watched(train, WATCHER), "TP351")
    assert f.step == NAN_STEP and f.subject == "Scaled" and f.extra["op"] == "div" and f.extra["replay"] == "exact"


# ------------------------------------------------------------------------------------------ backward
def test_backward_only_nan_on_an_unsampled_step_is_named_at_its_module():
    torch.manual_seed(0)
    findings = watched(lambda: _train(_norm_net(), _zero_row_batch), WATCHER)
    (f,) = findings
    assert f.code == "TP352" and f.step == NAN_STEP and f.subject == "1"
    assert "the gradient became NaN in the backward of `1`" in f.message
    assert f.extra["op"] == "sqrt" and f.extra["replay"] == "exact"


def test_nan_from_a_functional_loss_outside_any_module_is_placed_after_the_model():
    """log(softmax(x)) written out: a probability that underflows to 0 makes the loss and its gradient NaN."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def train():
        for step in range(NAN_STEP + 2):
            x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
            if step == NAN_STEP:
                x[2] *= 1e4  # logits far apart: exp underflows
            probs = model(x).softmax(-1)
            loss = -(probs.log() * F.one_hot(y, 3)).sum(-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    (f,) = watched(train, WATCHER)
    assert f.code == "TP352" and f.step == NAN_STEP and f.subject == "output of Sequential"
    assert "after the model" in f.message and f.extra["replay"] == "exact"


# ------------------------------------------------------------------------------------------ several calls per step
def test_a_model_called_twice_per_step_is_replayed_call_by_call():
    torch.manual_seed(0)
    model = _log_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def train():
        for step in range(NAN_STEP + 2):
            a, _ = _positive_batch(-1)
            b, _ = _positive_batch(step)     # the second call's data is corrupt at step 50
            loss = (model(a) - model(b)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    (f,) = watched(train, WATCHER)
    assert f.code == "TP351" and f.step == NAN_STEP and f.subject == "0" and f.extra["op"] == "log"
    assert "2 model calls" in f.message and f.extra["replay"] == "exact"


@pytest.mark.parametrize("bad_micro_batch", [0, 2])
def test_gradient_accumulation_replays_every_forward_and_backward_of_the_step(bad_micro_batch):
    torch.manual_seed(0)
    calls = iter(range(10 ** 6))

    def batch(step):  # 4 micro-batches per optimizer step; the bad one is the `bad_micro_batch`-th of step 50
        k = next(calls)
        return _zero_row_batch(k, nan_step=NAN_STEP * 4 + bad_micro_batch)

    findings = watched(lambda: _train(_norm_net(), batch, accumulate=4), WATCHER)
    (f,) = findings
    assert f.code == "TP352" and f.step == NAN_STEP and f.subject == "1" and f.extra["op"] == "sqrt"
    assert "4 model calls" in f.message and f.extra["replay"] == "exact"


# ------------------------------------------------------------------------------------------ RNG and buffers
class DroppedRowNorm(nn.Module):
    """Divides each row by its sum after dropout: a row dropout zeroes entirely is 0/0."""

    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, h):
        h = self.drop(h)
        return h / h.sum(-1, keepdim=True)


def _dropout_training(watchers=None, steps=120):
    """The first NaN comes from dropout's draw alone: the step it happens at is whatever the RNG says."""
    torch.manual_seed(17)
    model = nn.Sequential(nn.Linear(3, 3), nn.Softplus(), DroppedRowNorm(), nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    first = []

    def train():
        for step in range(steps):
            x = torch.randn(2, 3)
            loss = model(x).pow(2).mean()
            if not first and not torch.isfinite(loss):
                first.append(step)
            opt.zero_grad()
            loss.backward()
            opt.step()

    findings = watched(train, watchers) if watchers is not None else train()
    return findings, first[0]


def test_the_replay_draws_the_same_dropout_masks_as_the_step():
    findings, first = _dropout_training(WATCHER)
    assert first >= 10 and first % 20  # an unsampled step (the seed is chosen so)
    (f,) = only(findings, "TP351")
    assert f.step == first and f.subject == "2" and f.extra["op"] == "div" and f.extra["replay"] == "exact"


class AuxHead(nn.Module):
    """An auxiliary head on the trunk's detached features and on side features ``z``, where the NaN arises."""

    def __init__(self, kind):
        super().__init__()
        if kind == "forward":
            self.feat, width = LogFeatures(), 4
        else:
            self.feat, width = nn.Sequential(nn.Linear(4, 8, bias=False), RowNorm()), 9
        self.out = nn.Linear(16 + width, 1)

    def forward(self, h, z):
        return self.out(torch.cat([h, self.feat(z)], -1))


class TwoHeads(nn.Module):
    """The NaN arises in the auxiliary head, which sees the trunk's features detached: the trunk (BatchNorm,
    dropout) and the main head keep training with finite values after it, so their state shows whether the
    replay disturbed anything (dropout's RNG, BatchNorm's running statistics)."""

    def __init__(self, kind):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.3))
        self.head, self.aux = nn.Linear(16, 1), AuxHead(kind)

    def forward(self, x, z):
        h = self.trunk(x)
        return self.head(h), self.aux(h.detach(), z)


def _two_head_training(kind, watchers):
    torch.manual_seed(0)
    model = TwoHeads(kind)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    corrupt = _positive_batch if kind == "forward" else _zero_row_batch

    def train():
        for step in range(NAN_STEP + 10):
            x = torch.randn(16, 4)
            z, _ = corrupt(step)
            target = x.sum(-1, keepdim=True)
            main, side = model(x, z)
            loss = F.mse_loss(main, target) + 0.1 * F.mse_loss(side, target)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            model(torch.randn(4, 4), torch.rand(4, 4) + 0.5)

    findings = watched(train, watchers) if watchers != "plain" else train()
    return findings, model.state_dict(), opt.state_dict()["state"], torch.get_rng_state()


@pytest.mark.parametrize("kind", ["forward", "backward"])
def test_training_with_a_replay_is_bit_identical_to_training_without_torchpact(kind):
    _, plain, plain_opt, plain_rng = _two_head_training(kind, "plain")
    findings, state, opt_state, rng = _two_head_training(kind, None)  # every default watcher
    (f,) = [f for f in findings if f.code in ("TP351", "TP352")]
    assert f.step == NAN_STEP and f.subject == ("aux.feat" if kind == "forward" else "aux.feat.1")
    assert f.extra["replay"] == "exact" and "TP002" not in codes(findings)
    assert torch.equal(plain_rng, rng)
    assert plain.keys() == state.keys()
    for name in plain:
        if name.startswith("aux."):  # NaN since step 50, in the same places
            assert _same(plain[name], state[name]), name
        else:  # trunk (BatchNorm's running statistics and num_batches_tracked too) and main head: exactly equal
            assert torch.equal(plain[name], state[name]), name
    for k in plain_opt:
        for key in plain_opt[k]:
            assert _same(plain_opt[k][key], opt_state[k][key]), (k, key)
    assert not torch.isnan(plain["trunk.1.running_mean"]).any() and plain["trunk.1.num_batches_tracked"] == 60


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


# ------------------------------------------------------------------------------------------ unfaithful replays
def test_inputs_changed_in_place_after_the_call_are_not_replayed_and_the_finding_says_so():
    torch.manual_seed(0)
    model = _log_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    staging = torch.empty(16, 4)  # one input buffer, refilled in place

    def train():
        staging.copy_(_positive_batch(0)[0])
        for step in range(NAN_STEP + 2):
            loss = F.mse_loss(model(staging), staging.sum(-1, keepdim=True))
            opt.zero_grad()
            loss.backward()
            staging.copy_(_positive_batch(step + 1)[0])  # the next batch is loaded before the step
            opt.step()

    (f,) = watched(train, WATCHER)
    assert f.code == "TP352" and f.step == NAN_STEP
    assert f.subject == "unrecorded step" and f.extra["replay"] == "failed"
    assert "could not be replayed: the 1st argument of `Sequential`'s call was modified in place after the call" in \
        f.message


class CountingScale(nn.Module):
    """Divides by (calls - 51): its 51st call (step 50) divides by zero. A replay runs it a 52nd time."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x / (self.calls - 51)


def test_a_replay_that_does_not_reproduce_the_step_claims_no_origin():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), CountingScale(), nn.Linear(8, 1))
    findings = watched(lambda: _train(model, _positive_batch), WATCHER)
    (f,) = findings
    assert f.code == "TP352" and f.step == NAN_STEP and f.subject == "unrecorded step"
    assert f.extra["replay"] == "differs"
    assert ("its replay before the update (1 model call on the same inputs, parameters and RNG state) did not "
            "reproduce it: the output of `Sequential` differs from the step's") in f.message


def test_module_hooks_left_out_of_the_replay_are_named():
    torch.manual_seed(0)
    model = _log_net()
    model[1].register_forward_hook(lambda module, args, out: None)
    (f,) = watched(lambda: _train(model, _positive_batch), WATCHER)
    assert f.code == "TP351" and f.subject == "0" and "the module hooks of `1` were not run in the replay" in f.message


# ------------------------------------------------------------------------------------------ clean runs
def test_a_clean_long_run_is_silent_and_replays_nothing():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.MSELoss()

    def train():
        for _ in range(300):
            x = torch.randn(32, 8)
            loss = criterion(model(x), x.sum(-1, keepdim=True))
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

    with_watch = {}

    def run():
        train()
        with_watch["ok"] = True

    assert watched(run, WATCHER) == [] and with_watch["ok"]


def test_the_outermost_calls_are_kept_by_reference_not_copied():
    from torchpact.watch import watch

    torch.manual_seed(0)
    model = _log_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with watch(WATCHER, sampler=Sampler(first=1, every=100)) as session:
        for step in range(3):
            x, y = _positive_batch(step)
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            (watcher,) = session.watchers
            if step == 2:  # unsampled: the call is kept, its output's gradient too
                (capture,) = watcher._captures.items
                assert capture.args[0] is x and capture.module is model and capture.kwargs == {}
                assert capture.grads[0] is not None and capture.grads[0].shape == (16, 1)
            opt.step()


def test_a_kept_call_is_freed_when_the_next_iteration_begins_without_the_garbage_collector():
    import gc
    import weakref

    torch.manual_seed(0)
    model = _log_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    refs = []
    gc.disable()
    try:
        with watch_nonfinite(Sampler(first=1, every=100)):
            for step in range(4):
                x, y = _positive_batch(step)
                out = model(x)
                refs.append(weakref.ref(out))
                loss = F.mse_loss(out, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                del out, loss
        # the output of step 2 (unsampled: kept with a hook on it) was dropped when step 3's forward began
        assert refs[2]() is None
    finally:
        gc.enable()


def watch_nonfinite(sampler):
    from torchpact.watch import watch

    return watch(WATCHER, sampler=sampler)


def test_a_gan_generator_whose_backward_turns_nan_after_the_discriminator_stepped():
    """The generator's output is differentiated for its own step, after the discriminator's: its call was
    made in the previous iteration and is replayed with the discriminator's call on it."""
    torch.manual_seed(0)
    gen = nn.Sequential(nn.Linear(4, 8, bias=False), RowNorm(), nn.Linear(9, 4))
    disc = nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
    opt_d = torch.optim.Adam(disc.parameters(), lr=1e-3)
    opt_g = torch.optim.Adam(gen.parameters(), lr=1e-3)
    bce = nn.BCEWithLogitsLoss()

    def train():
        for step in range(NAN_STEP + 2):
            z = torch.randn(8, 4)
            if step == NAN_STEP:
                z[1] = 0.0
            fake, real = gen(z), torch.randn(8, 4) + 2
            d_loss = bce(disc(real), torch.ones(8, 1)) + bce(disc(fake.detach()), torch.zeros(8, 1))
            opt_d.zero_grad()
            d_loss.backward()
            opt_d.step()
            g_loss = bce(disc(fake), torch.ones(8, 1))
            opt_g.zero_grad()
            g_loss.backward()
            opt_g.step()

    (f,) = only(watched(train, WATCHER), "TP352")
    assert f.step == NAN_STEP + 1  # the discriminator steps first: it counts the steps
    assert f.subject == "1" and f.extra["op"] == "sqrt" and f.extra["replay"] == "exact"
    assert "3 model calls" in f.message  # gen (previous iteration), disc(fake) and the BCE loss module


DDP_SCRIPT = '''
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class LogFeatures(nn.Module):
    def forward(self, x):
        return torch.log(x)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(LogFeatures(), nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.Generator().manual_seed(rank)
    for step in range(53):
        x = torch.rand(8, 4, generator=data) + 0.5
        if step == 50 and rank == 1:
            x[2, 1] = -1.0
        loss = F.mse_loss(model(x), x.sum(-1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


main()
'''


def test_under_ddp_the_rank_whose_data_made_the_nan_names_it_and_the_others_say_why_they_cannot(tmp_path):
    import json
    import os
    import signal
    import subprocess
    import sys

    (tmp_path / "train.py").write_text(DDP_SCRIPT)
    cmd = [sys.executable, "-m", "torchpact", "run", "--quiet", "--format", "json", "--output", "out.json",
           "--watchers", "nonfinite", "--nproc", "2", "train.py"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    findings = json.loads((tmp_path / "out.json").read_text())["findings"]
    by_rank = {f["rank"]: f for f in findings}
    assert sorted(by_rank) == [0, 1], (findings, stderr[-2000:])
    named, other = by_rank[1], by_rank[0]
    assert named["code"] == "TP351" and named["step"] == NAN_STEP and named["subject"] == "0"
    assert named["extra"]["op"] == "log" and named["extra"]["replay"] == "exact"
    assert other["code"] == "TP352" and other["subject"] == "unrecorded step" and other["extra"]["replay"] == "finite"
    assert "stayed finite, with outputs equal to the step's bit for bit" in other["message"]
    assert "or on another rank (DistributedDataParallel averages the gradients of every rank" in other["message"]


def test_nan_made_by_a_gradient_hook_is_not_blamed_on_a_module():
    """A parameter hook that normalises the gradient divides by its norm: 0/0 when the gradient is zero. The
    replay's leaves carry no hook, so it stays finite and says where else the NaN can come from."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    model[2].bias.register_hook(lambda g: g / g.norm())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def train():
        for step in range(NAN_STEP + 2):
            x = torch.randn(16, 4)
            y = model(x).detach() if step == NAN_STEP else x.sum(-1, keepdim=True)  # a perfect fit: zero gradient
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    (f,) = watched(train, WATCHER)
    assert f.code == "TP352" and f.step == NAN_STEP and f.subject == "unrecorded step" and f.extra["replay"] == "finite"
    assert "stayed finite, with outputs equal to the step's bit for bit: they arose outside these calls" in f.message
    assert "a gradient hook" in f.message


def test_a_script_making_many_small_model_calls_per_step_keeps_none_and_says_so():
    """A policy called at every time step of a rollout: keeping each call would cost a tenth of its time."""
    torch.manual_seed(0)
    policy = _log_net()
    opt = torch.optim.SGD(policy.parameters(), lr=0.01)

    def train():
        for step in range(NAN_STEP + 2):
            outs = []
            for t in range(20):
                x, _ = _positive_batch(step if t == 7 else -1)
                outs.append(policy(x))
            loss = torch.cat(outs).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    with_watch = {}
    from torchpact.watch import watch

    with watch(WATCHER) as session:
        train()
        with_watch["captures"] = session.watchers[0]._captures
    assert with_watch["captures"].items == [] and with_watch["captures"].off is not None
    (f,) = session.findings
    assert f.code == "TP352" and f.step == NAN_STEP and f.subject == "unrecorded step" and f.extra["replay"] == "failed"
    assert ("could not be replayed: the script's steps make more than 16 model calls, which torchpact does not keep"
            in f.message)


def test_one_iteration_with_many_calls_does_not_stop_the_next_steps_from_being_kept():
    """A validation pass left with grad enabled between two steps: that iteration keeps none, the next ones do."""
    torch.manual_seed(0)
    model = _log_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def train():
        for step in range(NAN_STEP + 2):
            if step == 30:
                for _ in range(40):
                    model(torch.rand(4, 4) + 0.5)  # no torch.no_grad(): every call could reach a gradient
            x, y = _positive_batch(step)
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    (f,) = watched(train, WATCHER)
    assert f.code == "TP351" and f.step == NAN_STEP and f.subject == "0" and f.extra["replay"] == "exact"


def test_a_gradient_placed_after_the_model_needs_the_replayed_output_checked_against_the_step():
    """The NaN is in the loss, but the model's output was clamped in place after the call: the replay's output
    cannot be compared with it, so the gradient reaching it (the step's) is not placed after the model."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def train():
        for step in range(NAN_STEP + 2):
            out = model(torch.randn(8, 4))
            out.clamp_(-1e3, 1e3)
            loss = out.mean() + (torch.sqrt(out - out).sum() if step == NAN_STEP else 0)
            opt.zero_grad()
            loss.backward()
            opt.step()

    (f,) = watched(train, WATCHER)
    assert f.code == "TP352" and f.step == NAN_STEP and f.subject == "unrecorded step"
    assert f.extra["replay"] == "unchecked" and "its replay could not be checked against the step" in f.message


def test_an_output_changed_in_place_still_lets_a_module_s_backward_be_named_with_a_caveat():
    """Twin of the above: the output is clamped in place, but the NaN arises inside the model (sqrt at an all-zero
    row), where the replay's own forward and backward meet: the module is named, and the finding says the
    outputs were not compared."""
    torch.manual_seed(0)
    model = _norm_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def train():
        for step in range(NAN_STEP + 2):
            x, y = _zero_row_batch(step)
            out = model(x)
            out.clamp_(-1e3, 1e3)
            loss = F.mse_loss(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    (f,) = watched(train, WATCHER)
    assert f.code == "TP352" and f.step == NAN_STEP and f.subject == "1" and f.extra["op"] == "sqrt"
    assert "its outputs could not be compared with the step's" in f.message


# ------------------------------------------------------------------------------------------ the replay reaches no one
class Jittered(nn.Module):
    """Draws from Python's and NumPy's generators in its forward (without using the draws, so the step
    is still reproduced) and calls a functional batch norm and dropout, which watchers wrap."""

    def __init__(self):
        super().__init__()
        self.inner = _norm_net()
        self.register_buffer("mean", torch.zeros(4))
        self.register_buffer("var", torch.ones(4))

    def forward(self, x):
        import random

        import numpy as np

        random.random()
        np.random.rand()
        h = self.inner(F.dropout(x, 0.0, self.training))
        return h + F.batch_norm(x, self.mean, self.var, training=self.training, momentum=0.9).sum(-1, keepdim=True)


def _jittered_training(watchers):
    import random

    import numpy as np

    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    model = Jittered()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def train():
        for step in range(NAN_STEP + 3):
            x, y = _zero_row_batch(step)
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    findings = watched(train, watchers) if watchers != "plain" else train()
    return findings, random.random(), float(np.random.rand()), model.mean.clone()


def test_the_replay_leaves_python_s_and_numpy_s_generators_and_the_watchers_wrappers_alone():
    _, plain_py, plain_np, plain_mean = _jittered_training("plain")
    findings, py, np_draw, mean = _jittered_training(None)  # every default watcher
    (f,) = [f for f in findings if f.code in ("TP351", "TP352")]
    assert f.step == NAN_STEP and f.subject == "inner.1" and f.extra["replay"] == "exact"
    assert (py, np_draw) == (plain_py, plain_np)
    assert torch.equal(mean, plain_mean)
    assert [x.code for x in findings].count("TP465") == 1  # the step's call, not the replay's
