"""optimizer: TP401 (grads never zeroed), TP404 (step without gradients), TP451 (in no optimizer),
TP452 (frozen parameters an optimizer holds or still moves)."""

from __future__ import annotations

import inspect

import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.watch.util import codes, run_source, watched

WATCHER = ["optimizer"]


def _mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))


def _batch():
    return torch.randn(8, 8), torch.randint(0, 3, (8,))


def _line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


# ---------------------------------------------------------------------------------------- TP401
def test_no_zero_grad_is_reported_with_clipping():
    def run():
        model = _mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        for _ in range(8):
            x, y = _batch()
            F.cross_entropy(model(x), y).backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

    found = watched(run, WATCHER)
    assert codes(found) == ["TP401"]
    f = found[0]
    assert f.subject == "opt" and "all its 4 parameters were not zeroed" in f.message
    assert f.line == _line_of(run, "opt.step()")


def test_model_zero_grad_misses_a_parameter_outside_the_model():
    def run():
        model = _mlp()
        log_temp = nn.Parameter(torch.zeros(()))
        opt = torch.optim.Adam([*model.parameters(), log_temp], lr=1e-3)
        for _ in range(8):
            x, y = _batch()
            model.zero_grad()
            F.cross_entropy(model(x) * log_temp.exp(), y).backward()
            opt.step()

    found = watched(run, WATCHER)
    assert codes(found) == ["TP401"]
    assert found[0].extra["parameters"] == ["log_temp"]
    assert "optimizer.zero_grad() rather than model.zero_grad()" in found[0].fix


def test_accumulation_with_set_to_none_false_is_not_mistaken_for_a_missing_zero_grad():
    def run():
        model = _mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for i in range(48):
            x, y = _batch()
            (F.cross_entropy(model(x), y) / 4).backward()
            if (i + 1) % 4 == 0:
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=False)

    assert watched(run, WATCHER) == []


# ---------------------------------------------------------------------------------------- TP404
def test_step_before_backward():
    def run():
        model = _mlp()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for _ in range(6):
            x, y = _batch()
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            opt.step()
            loss.backward()

    found = watched(run, WATCHER)
    assert codes(found) == ["TP404"]
    f = found[0]
    assert f.severity.value == "error" and "none of its 4 parameters had a gradient" in f.message
    assert f.line == _line_of(run, "opt.step()")


def test_zero_grad_in_place_between_backward_and_step():
    def run():
        model = _mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        for _ in range(6):
            x, y = _batch()
            F.cross_entropy(model(x), y).backward()
            opt.zero_grad(set_to_none=False)
            opt.step()

    found = watched(run, WATCHER)
    assert codes(found) == ["TP404"]
    assert "exactly zero" in found[0].message or "none of its" in found[0].message


def test_short_run_reports_at_close_with_two_bad_steps():
    def run():
        model = _mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for _ in range(2):
            loss = model(torch.randn(2, 8)).sum()
            opt.zero_grad()
            opt.step()
            loss.backward()

    assert codes(watched(run, WATCHER)) == ["TP404"]


def test_lbfgs_closure_and_conditional_steps_are_silent():
    def run():
        model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
        opt = torch.optim.LBFGS(model.parameters(), max_iter=3)
        x, y = _batch()

        def closure():
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            return loss

        for _ in range(5):
            opt.step(closure)

        # an auxiliary optimizer stepped every iteration, its loss only every third one
        aux = nn.Linear(8, 1)
        aux_opt = torch.optim.SGD(aux.parameters(), lr=0.1)
        for i in range(12):
            aux_opt.zero_grad()
            if i % 3 == 0:
                aux(torch.randn(4, 8)).pow(2).mean().backward()
            aux_opt.step()

    assert watched(run, WATCHER) == []


def test_script_run_points_at_the_step_line(tmp_path):
    outcome = run_source(tmp_path, """
        import torch, torch.nn as nn

        model = nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(5):
            loss = model(torch.randn(3, 4)).pow(2).mean()
            loss.backward()
            optimizer.zero_grad()
            optimizer.step()
    """, watchers=WATCHER)
    assert outcome.exit_code == 0 and codes(outcome.findings) == ["TP404"]
    f = outcome.findings[0]
    assert f.subject == "optimizer" and f.path.endswith("train.py") and f.line == 10


# ---------------------------------------------------------------------------------------- TP451
def test_head_added_after_the_optimizer_points_at_its_creation():
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.backbone = nn.Sequential(nn.Linear(8, 16), nn.ReLU())

        def forward(self, x):
            return self.head(self.backbone(x))

    def run():
        model = Net()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model.head = nn.Linear(16, 3)  # attached after the optimizer was built
        for _ in range(5):
            x, y = _batch()
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()

    found = watched(run, WATCHER)
    assert codes(found) == ["TP451"]
    f = found[0]
    assert f.subject == "head" and "2 parameters" in f.message
    assert f.line == _line_of(run, "optimizer = torch.optim.AdamW")


def test_optimizer_built_from_the_encoder_only():
    class AutoEncoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.Sequential(nn.Linear(8, 4), nn.ReLU())
            self.decoder = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8))

        def forward(self, x):
            return self.decoder(self.encoder(x))

    def run():
        torch.manual_seed(0)
        model = AutoEncoder()
        opt = torch.optim.Adam(model.encoder.parameters(), lr=1e-3)
        for _ in range(6):
            x = torch.randn(8, 8)
            opt.zero_grad()
            F.mse_loss(model(x), x).backward()
            opt.step()

    found = watched(run, WATCHER)
    assert [(f.code, f.subject) for f in found] == [("TP451", "decoder")]
    assert found[0].extra["parameters"] == ["decoder.0.weight", "decoder.0.bias", "decoder.2.weight",
                                            "decoder.2.bias"]


# ---------------------------------------------------------------------------------------- TP452
def test_optimizer_holding_only_frozen_parameters():
    def run():
        model = _mlp()
        model.requires_grad_(False)           # meant: model[0].requires_grad_(False)
        model[2].requires_grad_(True)
        opt = torch.optim.Adam(model[0].parameters(), lr=1e-3)
        head_opt = torch.optim.Adam(model[2].parameters(), lr=1e-3)
        for _ in range(5):
            x, y = _batch()
            opt.zero_grad()
            head_opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            head_opt.step()

    found = watched(run, WATCHER)
    assert codes(found) == ["TP452"]
    assert found[0].subject == "opt" and "every parameter of `opt` (Adam)" in found[0].message
    assert found[0].line == _line_of(run, "opt = torch.optim.Adam(model[0]")


def test_frozen_during_training_but_still_moved_by_adam():
    def run():
        model = _mlp()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for i in range(8):
            if i == 3:
                model[0].requires_grad_(False)  # freeze the first layer after warm-up
            x, y = _batch()
            opt.zero_grad(set_to_none=False)
            F.cross_entropy(model(x), y).backward()
            opt.step()

    found = watched(run, WATCHER)
    assert codes(found) == ["TP452"]
    assert found[0].extra == {} and "0.weight" in found[0].message and "changed them" in found[0].message


def test_frozen_layers_in_the_optimizer_on_purpose_are_silent():
    def run():
        model = _mlp()
        model[0].requires_grad_(False)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for _ in range(25):
            x, y = _batch()
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        before = model[0].weight.clone()
        assert torch.equal(before, model[0].weight)

    assert watched(run, WATCHER) == []


# ---------------------------------------------------------------------------------------- clean loops
def test_cnn_with_momentum_scheduler_and_set_to_none_false_is_silent():
    def run():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(8 * 4 * 4, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=32)
        for i in range(32):
            x, y = torch.randn(8, 3, 8, 8), torch.randint(0, 4, (8,))
            opt.zero_grad(set_to_none=i % 2 == 0)
            F.cross_entropy(model(x), y).backward()
            nn.utils.clip_grad_norm_(model.parameters(), 2.0)
            opt.step()
            sched.step()

    assert watched(run, WATCHER) == []


def test_gan_grad_scaler_and_split_optimizers_are_silent():
    def run():
        torch.manual_seed(0)
        G = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
        D = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
        opt_d = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
        opt_g = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
        bce = nn.BCEWithLogitsLoss()
        for _ in range(22):
            real, z = torch.randn(8, 8), torch.randn(8, 4)
            fake = G(z)
            D.zero_grad(set_to_none=False)
            (bce(D(real), torch.ones(8, 1)) + bce(D(fake.detach()), torch.zeros(8, 1))).backward()
            opt_d.step()
            G.zero_grad(set_to_none=False)
            bce(D(fake), torch.ones(8, 1)).backward()  # also adds into D's grads; zeroed next iteration
            opt_g.step()

        # mixed precision with a GradScaler, an encoder/decoder split over two optimizers
        enc, dec = nn.Linear(8, 4), nn.Linear(4, 8)
        opt_e = torch.optim.AdamW(enc.parameters(), lr=1e-3)
        opt_dec = torch.optim.SGD(dec.parameters(), lr=1e-2, momentum=0.9)
        scaler = torch.amp.GradScaler("cpu")
        for _ in range(12):
            x = torch.randn(8, 8)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.mse_loss(dec(enc(x)).float(), x)
            opt_e.zero_grad()
            opt_dec.zero_grad()
            scaler.scale(loss).backward()
            scaler.unscale_(opt_e)
            nn.utils.clip_grad_norm_(enc.parameters(), 1.0)
            scaler.step(opt_e)
            scaler.step(opt_dec)
            scaler.update()

    assert watched(run, WATCHER) == []


def test_optimizer_that_starts_stepping_later_is_not_missing():
    def run():
        torch.manual_seed(0)
        G = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
        D = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
        opt_g, opt_d = torch.optim.Adam(G.parameters()), torch.optim.Adam(D.parameters())
        for i in range(10):
            fake = G(torch.randn(8, 4))
            if i >= 6:  # the critic only starts training after a warm-up; it gets gradients before that
                opt_d.zero_grad()
                (D(torch.randn(8, 8)).mean() - D(fake.detach()).mean()).backward()
                opt_d.step()
            opt_g.zero_grad()
            D(fake).mean().backward()
            opt_g.step()

    assert watched(run, WATCHER) == []


def test_head_only_training_with_no_grad_backbone_is_silent():
    backbone, head = nn.Sequential(nn.Linear(8, 16), nn.ReLU()), nn.Linear(16, 3)

    def run():
        opt = torch.optim.SGD(head.parameters(), lr=0.1)
        for _ in range(6):
            x, y = _batch()
            with torch.no_grad():
                h = backbone(x)
            opt.zero_grad()
            F.cross_entropy(head(h), y).backward()
            opt.step()

    assert watched(run, WATCHER) == []


def test_training_is_bitwise_identical_and_no_hook_is_left_behind():
    def train(model, zero: bool):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        torch.manual_seed(5)
        for _ in range(24):
            x, y = _batch()
            if zero:
                opt.zero_grad(set_to_none=False)
            F.cross_entropy(model(x), y).backward()
            opt.step()

    for zero in (True, False):
        plain, observed = _mlp(), _mlp()
        train(plain, zero)
        watched(lambda m=observed, z=zero: train(m, z), WATCHER)
        for (name, a), b in zip(plain.state_dict().items(), observed.state_dict().values(), strict=True):
            assert torch.equal(a, b), name
        for p in observed.parameters():
            assert p._post_accumulate_grad_hooks is None


def test_many_left_out_modules_of_one_class_are_one_finding():
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(
                nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.ReLU()) for _ in range(5))
            self.head = nn.Linear(8, 3)

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    def run():
        torch.manual_seed(0)
        model = Net()
        # batch-norm parameters filtered out by mistake (meant: no weight decay for them)
        params = [p for m in model.modules() if not isinstance(m, nn.BatchNorm1d)
                  for p in m.parameters(recurse=False)]
        opt = torch.optim.SGD(params, lr=0.01)
        for _ in range(5):
            x, y = _batch()
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()

    found = watched(run, WATCHER)
    assert [(f.code, f.subject) for f in found] == [("TP451", "BatchNorm1d modules")]
    message = found[0].message
    assert message.startswith("5 `BatchNorm1d` modules (`blocks.0.1`, `blocks.1.1`, `blocks.2.1`, `blocks.3.1` "
                              "and 1 more; 10 parameters in all) get gradients but are not in the optimizer")
    assert len(found[0].extra["parameters"]) == 10
