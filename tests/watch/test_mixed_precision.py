"""mixed_precision: TP304 (float16 gradients overflow/underflow without a GradScaler) and TP356 (scale collapse).

CPU float16 autocast and `torch.amp.GradScaler("cpu")` exercise the same code paths as CUDA on torch 2.13
(the backward of an autocast Linear is a float16 matmul; the scaler halves its scale on inf/NaN).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.watch.test_nonfinite import _grad_scaler_training
from tests.watch.util import codes, run_source, watched
from torchpact.findings import Severity

WATCHER = ["mixed_precision"]


def _tiny_loss_training(scaler_mode: str | None = None, dtype=torch.float16, half: bool = False, steps: int = 6):
    """A loss of scale 1e-7: its activation gradients are below float16's smallest subnormal (6e-08)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 1))
    if half:
        model.half()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = None
    if scaler_mode is not None:
        scaler = torch.amp.GradScaler("cpu", enabled=scaler_mode == "enabled")
    for _ in range(steps):
        x, y = torch.randn(64, 16), torch.randn(64, 1)
        if half:
            loss = ((model(x.half()) - y.half()) ** 2).mean() * 1e-6
        else:
            with torch.autocast("cpu", dtype=dtype):
                loss = ((model(x) - y) ** 2).mean() * 1e-7
        opt.zero_grad()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()


def test_fp16_underflow_without_a_scaler(tmp_path):
    findings = watched(_tiny_loss_training, WATCHER)
    assert codes(findings) == ["TP304"]
    (f,) = findings
    assert f.severity is Severity.WARNING and f.step == 2 and f.extra["kind"] == "underflow"
    assert "100% of the float16-computed gradients are exactly zero" in f.message
    assert "`0.weight` (100% zeros)" in f.message and "no GradScaler is in use" in f.message
    assert "GradScaler" in f.fix and "bfloat16" in f.fix


def test_the_same_training_with_a_scaler_or_in_bfloat16_is_silent():
    assert watched(lambda: _tiny_loss_training("enabled"), WATCHER) == []
    assert watched(lambda: _tiny_loss_training(dtype=torch.bfloat16), WATCHER) == []


def test_a_disabled_scaler_does_not_count():
    (f,) = watched(lambda: _tiny_loss_training("disabled"), WATCHER)
    assert f.code == "TP304" and "`enabled=False`" in f.message


def test_pure_float16_parameters_get_the_master_weights_fix():
    (f,) = watched(lambda: _tiny_loss_training(half=True), WATCHER)
    assert f.code == "TP304" and f.extra["kind"] == "underflow"
    assert "keep float32 parameters" in f.fix


def test_fp16_overflow_in_the_backward_without_a_scaler():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)

    def train():
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.float16):
                loss = model(torch.randn(4, 8)).float().sum() * 1e5  # d(loss)/d(out) = 1e5 > 65504
            opt.zero_grad()
            loss.backward()
            opt.step()

    (f,) = watched(train, WATCHER)
    assert f.code == "TP304" and f.extra["kind"] == "overflow" and f.step == 0
    assert "hold inf/NaN" in f.message and "`2.weight`" in f.message


def test_healthy_fp16_training_without_a_scaler_is_silent():
    # losses of normal scale keep float16 gradients in range: nothing to report at runtime
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters(), 1e-3)

    def train():
        for _ in range(6):
            x, y = torch.randn(16, 16), torch.randint(0, 4, (16,))
            with torch.autocast("cpu", dtype=torch.float16):
                loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    assert watched(train, WATCHER) == []


# ------------------------------------------------------------------------------------------ TP356
def _scaler_training(outlier_share: float, steps: int = 40, capture: dict | None = None):
    """Batches with an outlier overflow float16 in the forward: the scaler skips them and halves its scale."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu")
    draw = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.rand(8, 16)
        if torch.rand((), generator=draw) < outlier_share:
            x[0] = 1e5
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(x).float().mean()
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    if capture is not None:
        capture["scale"] = scaler.get_scale()


def test_a_scale_that_collapses_because_every_step_overflows():
    out = {}
    findings = watched(lambda: _scaler_training(1.0, capture=out), WATCHER)
    assert out["scale"] < 1e-6
    (f,) = findings
    assert f.code == "TP356" and f.subject == "GradScaler" and f.step == 0
    assert "fell from 6.55e+04 to 0.5" in f.message and "no optimizer step was taken" in f.message
    assert "below 1" in f.message and "TP351" in f.fix


def test_a_scale_that_keeps_halving_on_most_steps():
    (f,) = watched(lambda: _scaler_training(0.7), WATCHER)
    assert f.code == "TP356" and "since its first taken step were skipped" in f.message
    assert f.extra["skipped"] >= 8


@pytest.mark.parametrize("share", [0.0, 0.2])
def test_calibration_and_occasional_skips_are_healthy(share):
    # the scaler's first halvings calibrate 65536 down; a skip on 1 batch in 5 is what it is for
    assert watched(lambda: _scaler_training(share), WATCHER) == []


def test_grad_scaler_aware_fused_optimizer_is_silent():
    assert watched(_grad_scaler_training, WATCHER) == []


def test_a_scaler_held_by_a_trainer_object_is_found(tmp_path):
    out = run_source(tmp_path, """
        import torch
        from torch import nn

        class Trainer:
            def __init__(self):
                self.model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 1))
                self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
                self.scaler = torch.amp.GradScaler("cpu")

            def step(self, x):
                with torch.autocast("cpu", dtype=torch.float16):
                    loss = torch.sqrt(self.model(x).float() - 1e9).mean()  # NaN gradients at every step
                self.opt.zero_grad()
                self.scaler.scale(loss).backward()
                self.scaler.step(self.opt)
                self.scaler.update()

        trainer = Trainer()
        for _ in range(30):
            trainer.step(torch.randn(4, 4))
    """, watchers=WATCHER)
    assert out.exit_code == 0 and codes(out.findings) == ["TP356"]
    (f,) = out.findings
    assert f.path.endswith("train.py") and f.line == 13


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: autocast('cuda') float16 kernels and "
                    "GradScaler('cuda'); the CPU tests above cover the same logic")
def test_cuda_fp16_underflow_and_scaler():
    def train(use_scaler):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 1)).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cuda", enabled=use_scaler)
        for _ in range(6):
            x, y = torch.randn(64, 16, device="cuda"), torch.randn(64, 1, device="cuda")
            with torch.autocast("cuda"):
                loss = ((model(x) - y) ** 2).mean() * 1e-7
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

    assert codes(watched(lambda: train(False), WATCHER)) == ["TP304"]
    assert watched(lambda: train(True), WATCHER) == []


@pytest.mark.parametrize("train", ["_cnn_training", "_transformer_training", "_gan_training"])
def test_float32_training_is_silent(train):
    import tests.watch.test_nonfinite as loops

    assert watched(getattr(loops, train), WATCHER) == []
