"""nonfinite: TP351 (forward turns NaN/inf) and TP352 (backward turns NaN/inf), on real training loops."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.watch.util import codes, run_source, watched
from torchpact.watch import Sampler
from torchpact.watch.watchers import nonfinite

WATCHER = ["nonfinite"]


def only(findings, code):
    return [f for f in findings if f.code == code]


# ------------------------------------------------------------------------------------------ forward
def test_forward_nan_names_the_module_the_op_its_line_and_the_step(tmp_path):
    out = run_source(tmp_path, """
        import torch
        from torch import nn

        class Normalize(nn.Module):
            def forward(self, x):
                return x / x.sum(-1, keepdim=True)

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.inp = nn.Linear(8, 16, bias=False)
                self.act = nn.ReLU()
                self.norm = Normalize()
                self.head = nn.Linear(16, 2)

            def forward(self, x):
                return self.head(self.norm(self.act(self.inp(x))))

        torch.manual_seed(0)
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(6):
            x = torch.rand(4, 8)
            if step == 3:
                x[1] = 0          # an all-zero sample: the row sum is 0, and 0 / 0 is NaN
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, watchers=WATCHER)
    assert out.exit_code == 0
    assert codes(out.findings) == ["TP351"]  # the NaN parameters of the following steps are not reported again
    (f,) = out.findings
    assert f.subject == "norm" and f.step == 3
    assert f.path.endswith("train.py") and f.line == 27          # the line that called the model
    assert f.extra["op"] == "div" and f.extra["op_line"] == 7   # the line of the op inside the module
    assert "although its inputs were finite" in f.message and "eps" in f.fix


def test_forward_fp16_overflow_names_the_matmul_and_suggests_float32(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    with torch.no_grad():
        model[2].weight.fill_(400.0)  # sums of 64 terms of about 400 * 15 overflow 65504 in float16
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def train():
        for _ in range(2):
            x = torch.rand(8, 64) * 30
            with torch.autocast("cpu", dtype=torch.float16):
                loss = model(x).float().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    findings = watched(train, WATCHER)
    (f,) = only(findings, "TP351")
    assert f.subject == "2" and f.step == 0
    assert f.extra["dtype"] == "float16" and "65504" in f.fix
    assert "TP352" not in codes(findings)  # the backward NaN is a consequence of the forward one


def test_a_module_called_with_autocast_off_inside_an_autocast_forward_is_rerun_with_it_off():
    # the head's linear output (~1.2e5) fits float32 but not float16: re-run under the autocast around the
    # model, the op search would blame the linear in float16 instead of the exp that really overflows
    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 1)

        def forward(self, x):
            return self.proj(x).exp()

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(4, 4)
            self.head = Head()

        def forward(self, x):
            h = self.body(x)
            with torch.autocast("cpu", enabled=False):
                return self.head(h.float().abs() + 30)

    torch.manual_seed(0)
    model = Model()
    with torch.no_grad():
        model.head.proj.weight.fill_(1000.0)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def train():
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(torch.randn(8, 4)).float().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    (f,) = only(watched(train, WATCHER), "TP351")
    assert f.subject == "head"
    assert (f.extra["op"], f.extra["dtype"]) == ("exp", "float32")


def test_softmax_over_a_fully_masked_row_is_blamed_on_the_softmax_not_on_the_mask():
    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qk = nn.Linear(8, 16)

        def forward(self, x, mask):
            q, k = self.qk(x).chunk(2, dim=-1)
            scores = (q @ k.transpose(-1, -2)).masked_fill(~mask, float("-inf"))
            return scores.softmax(-1) @ x

    class MaskBuilder(nn.Module):  # outputs -inf on purpose: never reported by itself
        def forward(self, keep):
            return torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))

    torch.manual_seed(0)
    attn, builder, head = Attention(), MaskBuilder(), nn.Linear(8, 1)
    opt = torch.optim.Adam([*attn.parameters(), *head.parameters()], lr=1e-3)

    def train(empty_row_at):
        for step in range(4):
            x = torch.randn(2, 5, 8)
            keep = torch.ones(2, 5, 5, dtype=torch.bool).tril()
            if step == empty_row_at:
                keep[1, 2] = False  # every key of this query is masked
            bias = builder(keep)
            loss = head(attn(x, keep)).mean() + 0 * bias.clamp_min(0).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()

    assert watched(lambda: train(-1), WATCHER) == []
    findings = watched(lambda: train(2), WATCHER)
    (f,) = only(findings, "TP351")
    assert f.subject == "Attention" and f.step == 2
    assert f.extra["op"] == "softmax" and "-inf" in f.message and "finfo" in f.fix


def test_nan_in_the_data_is_reported_as_the_input_not_as_a_module():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train():
        for step in range(3):
            x = torch.randn(8, 4)
            if step == 1:
                x[0, 0] = float("nan")
            loss = model(x).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    findings = watched(train, WATCHER)
    assert codes(findings) == ["TP351"]
    (f,) = findings
    assert f.subject == "input of Sequential" and f.step == 1 and "data" in f.message


def test_nan_in_an_evaluation_under_no_grad_is_found_without_keeping_activations():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.LogSoftmax(-1))
    with torch.no_grad():
        model[2].weight[0] = float("inf")  # a broken checkpoint: logits with inf - inf

    def evaluate():
        model.eval()
        with torch.no_grad():
            for _ in range(2):
                model(torch.randn(3, 4))

    findings = watched(evaluate, WATCHER)
    (f,) = findings
    assert f.code == "TP351" and f.subject == "2" and "`2.weight` already holds NaN/inf" in f.message


# ------------------------------------------------------------------------------------------ backward
class Square(nn.Module):
    def forward(self, x):
        return x * x


class Root(nn.Module):
    def forward(self, x):
        return torch.sqrt(x)


class SqrtNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(4, 4, bias=False)
        self.square = Square()
        self.root = Root()
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        return self.head(self.root(self.square(self.inp(x))))


def _sqrt_training(anomaly: bool) -> None:
    torch.manual_seed(0)
    model = SqrtNet()
    with torch.no_grad():
        model.inp.weight[0] = 0.0  # unit 0 is exactly 0: sqrt(0 * 0) = 0 is finite, its derivative is inf
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(3):
        loss = model(torch.randn(8, 4)).mean()
        opt.zero_grad()
        if anomaly:
            with torch.autograd.detect_anomaly(check_nan=True):
                loss.backward()
        else:
            loss.backward()
        opt.step()


def test_backward_inf_is_blamed_on_the_sqrt_where_detect_anomaly_blames_the_later_mul():
    # detect_anomaly checks backward outputs for NaN only: SqrtBackward0 returns inf, which it lets
    # through, and MulBackward0 of `Square` (0 * inf) is the first NaN, so that is what it names.
    with pytest.warns(UserWarning), pytest.raises(RuntimeError, match="Function 'MulBackward0' returned nan"):
        _sqrt_training(anomaly=True)

    findings = watched(lambda: _sqrt_training(anomaly=False), WATCHER)
    assert codes(findings) == ["TP352"]
    (f,) = findings
    assert f.subject == "root" and f.step == 0
    assert "gradient of its output was finite" in f.message and "inf" in f.message
    assert f.extra["op"] == "sqrt" and f.path == __file__
    assert "sqrt(x + eps)" in f.fix


def test_backward_nan_in_the_loss_is_placed_after_the_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train():
        for _ in range(2):
            out = model(torch.randn(6, 4))
            loss = out.mean() + torch.sqrt(out - out).sum()  # sqrt at 0 in the loss: inf - inf = NaN
            opt.zero_grad()
            loss.backward()
            opt.step()

    findings = watched(train, WATCHER)
    (f,) = only(findings, "TP352")
    assert f.subject == "output of Sequential" and "after the model" in f.message


def test_where_over_sqrt_is_nan_in_the_backward_only():
    class SafeRoot(nn.Module):  # the classic: the forward picks 0, the backward still computes 0 * NaN
        def forward(self, x):
            return torch.where(x > 0, torch.sqrt(x), torch.zeros_like(x))

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), SafeRoot(), nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), 1e-3)

    def train():
        for _ in range(2):
            loss = model(torch.randn(16, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    findings = watched(train, WATCHER)
    assert codes(findings) == ["TP352"]
    (f,) = findings
    assert f.subject == "1" and "NaN" in f.message and f.extra["op"] == "sqrt" and f.step == 0


def test_nan_that_the_model_itself_masks_is_not_reported():
    class Imputer(nn.Module):  # missing values arrive as NaN and are imputed on purpose
        def forward(self, x):
            return torch.nan_to_num(x, nan=0.0)

    torch.manual_seed(0)
    model = nn.Sequential(Imputer(), nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def train():
        for _ in range(3):
            x = torch.randn(8, 4)
            x[x > 1] = float("nan")
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    assert watched(train, WATCHER) == []


def test_nan_gradient_on_an_unsampled_step_is_located_by_its_replay():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def train():
        for step in range(8):
            x = torch.randn(8, 4)
            out = model(x)
            loss = out.mean()
            if step == 5:  # an unsampled step: a functional sqrt at 0 in the loss
                loss = loss + torch.sqrt(out - out).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()

    findings = watched(train, WATCHER, sampler=Sampler(first=2, every=100))
    assert codes(findings) == ["TP352"]
    (f,) = findings
    assert f.step == 5 and f.subject == "output of Sequential" and "after the model" in f.message
    assert "step 5 was not recorded: this was seen in its replay" in f.message and f.extra["replay"] == "exact"


def _nan_on_step(nan_step: int, sampler: Sampler) -> list:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train():
        for step in range(nan_step + 3):
            out = model(torch.randn(6, 4))
            loss = out.mean()
            if step == nan_step:
                loss = loss + torch.sqrt(out - out).sum()  # sqrt at 0 in the loss: inf - inf = NaN
            opt.zero_grad()
            loss.backward()
            opt.step()

    return watched(train, WATCHER, sampler=sampler)


def test_a_periodic_sampled_step_is_checked_but_not_recorded_and_is_replayed_to_locate_it():
    periodic = Sampler(first=2, every=4, calls=None)
    findings = _nan_on_step(4, periodic)  # step 4: sampled by the every-4 pattern alone (module hooks on)
    (f,) = findings
    assert f.code == "TP352" and f.step == 4 and f.subject == "output of Sequential" and "after the model" in f.message
    assert f.extra["replay"] == "exact"

    (f,) = only(_nan_on_step(4, Sampler(first=5, every=4, calls=None)), "TP352")  # the rerun the fix names
    assert f.step == 4 and f.subject == "output of Sequential" and "after the model" in f.message
    (f,) = only(_nan_on_step(4, lambda step: step % 4 == 0), "TP352")  # an exact schedule records each of its steps
    assert f.step == 4 and f.subject == "output of Sequential"


def test_an_evaluation_on_a_periodic_step_is_still_recorded():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.LogSoftmax(-1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def train_then_evaluate():
        for _ in range(4):
            loss = -model(torch.randn(8, 4))[:, 0].mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():  # step 4, periodic: no gradient would ever show what this evaluation outputs
            model[2].weight[0] = float("inf")
            model.eval()
            model(torch.randn(3, 4))

    findings = watched(train_then_evaluate, WATCHER, sampler=Sampler(first=2, every=4, calls=None))
    (f,) = findings
    assert f.code == "TP351" and f.step == 4 and f.subject == "2"


def _clipped_training(nan: str | None = None, clip=lambda model: nn.utils.clip_grad_norm_(model.parameters(), 1.0)):
    """Steps 0-1 sampled, then unsampled; each clips before it steps. At step 5 a NaN gradient is put in
    place ``nan`` (``"before"`` or ``"after"``) the clip. Returns the findings and the ``_foreach_norm``
    ops step 6 ran (none of them is sampled)."""
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    norms = []

    def train():
        for step in range(8):
            with profile(activities=[ProfilerActivity.CPU]) if step == 6 else contextlib.nullcontext() as prof:
                loss = model(torch.randn(8, 4)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                if step == 5 and nan == "before":
                    model[0].weight.grad[0, 0] = math.nan
                clip(model)
                if step == 5 and nan == "after":
                    model[0].weight.grad[0, 0] = math.nan
                opt.step()
            if prof is not None:
                norms.append(sum(e.count for e in prof.key_averages() if e.key == "aten::_foreach_norm"))

    return watched(train, WATCHER, sampler=Sampler(first=2, every=100)), norms[0]


def test_an_unsampled_step_that_clips_reads_the_clips_total_norm_instead_of_its_own():
    findings, norms = _clipped_training()
    assert findings == [] and norms == 1  # the clip's own; without the shortcut there are 2


@pytest.mark.parametrize("nan", ["before", "after"])
def test_a_nan_gradient_around_the_clip_is_still_reported_on_its_unsampled_step(nan):
    # before: the clip's total is NaN; after: the clip's total is finite, the gradient's version changed
    (f,), _ = _clipped_training(nan)
    assert f.code == "TP352" and f.step == 5 and f.subject == "unrecorded step"


@pytest.mark.parametrize("clip", [
    lambda model: nn.utils.clip_grad_norm_(model[2].parameters(), 1.0),              # not every gradient
    lambda model: nn.utils.clip_grad_norm_(model.parameters(), 1.0, norm_type=0),    # counts NaN as non-zero
], ids=["subset", "zero-norm"])
def test_a_clip_that_does_not_vouch_for_every_gradient_leaves_the_check_to_its_own_norms(clip):
    (f,), norms = _clipped_training("before", clip)
    assert f.code == "TP352" and f.step == 5
    assert norms == 2


def test_rerun_of_a_module_with_dropout_and_batchnorm_changes_nothing():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(6, 6)
            self.bn = nn.BatchNorm1d(6)
            self.drop = nn.Dropout(0.3)

        def forward(self, x):
            h = self.drop(self.bn(self.lin(x)))
            return torch.log(h)  # negative values: NaN

    def train():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 6), Block(), nn.Linear(6, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            loss = model(torch.randn(16, 3)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return model, torch.get_rng_state()

    plain_model, plain_rng = train()
    result = {}
    findings = watched(lambda: result.update(out=train()), WATCHER)
    watched_model, watched_rng = result["out"]
    (f,) = only(findings, "TP351")
    assert f.subject == "1" and f.extra["op"] == "log" and f.step == 0
    assert torch.equal(plain_rng, watched_rng)
    for (name, a), b in zip(plain_model.state_dict().items(), watched_model.state_dict().values(), strict=True):
        assert torch.equal(a, b) or torch.allclose(a, b, equal_nan=True) and a.isnan().eq(b.isnan()).all(), name
        assert a.dtype == b.dtype


# ------------------------------------------------------------------------------------------ clean loops
def _cnn_training():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)
    for _ in range(12):
        x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    model.eval()
    with torch.no_grad():
        model(torch.randn(4, 3, 16, 16))
    return [p.detach().clone() for p in model.parameters()]


def _transformer_training():
    torch.manual_seed(0)
    emb = nn.Embedding(50, 32)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    head = nn.Linear(32, 50)
    emb.weight.requires_grad_(False)  # frozen on purpose
    opt = torch.optim.AdamW([*encoder.parameters(), *head.parameters()], lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 4))
    mask = nn.Transformer.generate_square_subsequent_mask(12)  # -inf above the diagonal
    for _step in range(8):
        for _ in range(2):  # gradient accumulation
            tokens = torch.randint(0, 50, (4, 12))
            logits = head(encoder(emb(tokens), mask=mask, is_causal=True))
            loss = F.cross_entropy(logits.reshape(-1, 50), tokens.roll(-1, 1).reshape(-1)) / 2
            loss.backward()
        torch.nn.utils.clip_grad_norm_(encoder.parameters(), 0.5)
        opt.step()
        opt.zero_grad()
        sched.step()
    return [p.detach().clone() for p in [*encoder.parameters(), *head.parameters()]]


def _gan_training(nan_in_generator: bool = False):
    torch.manual_seed(0)
    gen = nn.Sequential(nn.Linear(4, 16), nn.LeakyReLU(0.2), nn.Linear(16, 8))
    if nan_in_generator:
        gen = nn.Sequential(nn.Linear(4, 8), Square(), Root(), nn.Linear(8, 8))
        with torch.no_grad():
            gen[0].weight[0] = 0.0
            gen[0].bias[0] = 0.0
    disc = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
    for _ in range(6):
        real, z = torch.randn(8, 8), torch.randn(8, 4)
        fake = gen(z)
        d_loss = F.binary_cross_entropy_with_logits(disc(real), torch.ones(8, 1)) + \
            F.binary_cross_entropy_with_logits(disc(fake.detach()), torch.zeros(8, 1))
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()
        # the generator's graph was built before the discriminator stepped
        g_loss = F.binary_cross_entropy_with_logits(disc(fake), torch.ones(8, 1))
        opt_g.zero_grad()
        g_loss.backward()
        opt_g.step()
    return [p.detach().clone() for p in [*gen.parameters(), *disc.parameters()]]


def test_backward_through_a_graph_built_before_another_optimizer_stepped():
    findings = watched(lambda: _gan_training(nan_in_generator=True), WATCHER)
    (f,) = only(findings, "TP352")
    assert f.subject == "2" and f.step == 1 and "backward of `2`" in f.message and f.extra["op"] == "sqrt"


@pytest.mark.parametrize("hold_bytes", [0, nonfinite.HOLD_BYTES], ids=["reduced-at-once", "held"])
def test_backward_is_located_with_gradients_held_or_reduced_in_the_hook(monkeypatch, hold_bytes):
    monkeypatch.setattr(nonfinite, "HOLD_BYTES", hold_bytes)
    (f,) = only(watched(lambda: _sqrt_training(anomaly=False), WATCHER), "TP352")
    assert f.subject == "root" and f.extra["op"] == "sqrt"
    (f,) = only(watched(lambda: _gan_training(nan_in_generator=True), WATCHER), "TP352")
    assert f.subject == "2" and f.step == 1


def test_backward_is_located_for_the_second_optimizer_stepping_after_one_backward():
    torch.manual_seed(0)
    clean, sick = nn.Sequential(nn.Linear(4, 4), nn.Tanh()), SqrtNet()
    with torch.no_grad():
        sick.inp.weight[0] = 0.0
    opt_clean = torch.optim.SGD(clean.parameters(), lr=0.01)
    opt_sick = torch.optim.SGD(sick.parameters(), lr=0.01)

    def train():
        for _ in range(2):
            x = torch.randn(8, 4)
            loss = clean(x).mean() + sick(x).mean()
            opt_clean.zero_grad()
            opt_sick.zero_grad()
            loss.backward()
            opt_clean.step()  # finite: what fired is still needed by the next optimizer
            opt_sick.step()

    (f,) = only(watched(train, WATCHER), "TP352")
    assert f.subject == "root" and "backward of `root`" in f.message


def _grad_scaler_training():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)  # steps even on inf, skips inside
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 22)      # overflows at first: 4 skipped steps
    for _ in range(12):
        x = torch.randn(8, 16)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(x).float().pow(2).mean()
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return [torch.tensor(scaler.get_scale()), *[p.detach().clone() for p in model.parameters()]]


@pytest.mark.parametrize("train", [_cnn_training, _transformer_training, _gan_training, _grad_scaler_training])
def test_clean_training_is_silent_and_bitwise_identical(train):
    plain = train()  # dropout, batch norm, GradScaler: every step is sampled, every tensor hooked
    result = {}
    assert watched(lambda: result.update(out=train()), WATCHER) == []
    assert all(torch.equal(a, b) for a, b in zip(plain, result["out"], strict=True))


def test_grad_scaler_really_skipped_steps():
    """The GradScaler loop above does overflow at first: its silence is not for lack of infs."""
    scale = _grad_scaler_training()[0].item()
    assert scale < 2.0 ** 22


def test_inf_minus_inf_is_nan_in_the_sum_reduction():
    # the reduction the watcher relies on: NaN when NaN or both infinities, +-inf when only one
    t = torch.tensor([1.0, float("inf")])
    assert t.sum().item() == math.inf and torch.tensor([1.0, -math.inf]).sum().item() == -math.inf
    assert math.isnan(torch.tensor([math.inf, -math.inf]).sum().item())
    assert math.isnan(torch.tensor([1.0, math.nan, -math.inf]).sum().item())


# ------------------------------------------------------------------------------------------ in place
# With grad enabled the watcher holds the tensors and reduces them only when the model's output is
# bad; a tensor changed in place after it was seen no longer shows the value the module gave it.
class _Log(nn.Module):
    def forward(self, x):
        return x.log()  # NaN for the negative entries


class _Block(nn.Module):
    def __init__(self, residual_in_place: bool):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.log = _Log()
        self.relu = nn.ReLU(inplace=True)
        self.residual_in_place = residual_in_place

    def forward(self, x):
        out = self.log(self.fc(x))
        if self.residual_in_place:
            out += x  # as torchvision's BasicBlock does before its in-place ReLU
        return self.relu(out)


class _LogInline(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        h = self.fc(x)
        h.log_()  # fc's output, overwritten after fc returned
        return self.head(h)


def _first_step_nan(model: nn.Module) -> list:
    torch.manual_seed(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train():
        loss = model(torch.randn(4, 8)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    return only(watched(train, WATCHER), "TP351")


def test_an_in_place_module_does_not_hide_what_its_input_was():
    torch.manual_seed(0)
    (f,) = _first_step_nan(nn.Sequential(nn.Linear(8, 8), _Log(), nn.ReLU(inplace=True), nn.Linear(8, 1)))
    assert f.subject == "1" and f.extra["op"] == "log"  # its input is reduced before the ReLU overwrites it


def test_a_module_output_changed_in_place_later_is_blamed_on_the_enclosing_module():
    torch.manual_seed(0)
    (f,) = _first_step_nan(nn.Sequential(_Block(residual_in_place=True), nn.Linear(8, 1)))
    assert f.subject == "0" and f.extra["op"] == "log"  # `log`'s own output is gone: the block, and its op
    torch.manual_seed(0)
    (f,) = _first_step_nan(nn.Sequential(_Block(residual_in_place=False), nn.Linear(8, 1)))
    assert f.subject == "0.log"


def test_nan_written_in_place_after_a_module_returned_is_not_blamed_on_that_module():
    torch.manual_seed(0)
    (f,) = _first_step_nan(_LogInline())
    assert f.subject == "_LogInline" and f.extra["op"] == "log"  # not `fc`, whose output was finite


# ------------------------------------------------------------------------------------ inference_mode
def _cnn_with_inference_mode_eval(poison_step: int | None):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    y = torch.randint(0, 3, (8,))
    step = 0
    for _epoch in range(3):
        model.train()
        for _ in range(3):
            x = torch.randn(8, 1, 8, 8)
            if step == poison_step:
                x[0, 0, 0, 0] = float("nan")
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
        model.eval()
        with torch.inference_mode():  # inference tensors have no version counter
            out = model(torch.randn(8, 1, 8, 8))
            model(out.new_zeros(8, 1, 8, 8) + 1)


def test_evaluation_under_inference_mode_is_watched_without_failing():
    assert watched(lambda: _cnn_with_inference_mode_eval(None), WATCHER) == []


def test_nan_is_still_located_in_a_run_that_evaluates_under_inference_mode():
    findings = watched(lambda: _cnn_with_inference_mode_eval(4), WATCHER)
    assert "TP002" not in codes(findings)
    (f,) = only(findings, "TP351")
    assert f.step == 4 and f.subject == "input of Sequential"  # the NaN came in with the batch
