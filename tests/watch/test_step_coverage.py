"""step_coverage: TP490 when a script trains without an optimizer step (the step checks did not run)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tests.watch.util import codes, run_source, watched

WATCHER = ["step_coverage"]


def _data():
    torch.manual_seed(0)
    return torch.randn(32, 4), torch.randn(32, 1)


def test_manual_updates_say_the_step_checks_did_not_run(tmp_path):
    out = run_source(tmp_path, """
        import torch
        from torch import nn

        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        x, y = torch.randn(32, 4), torch.randn(32, 1)
        for step in range(20):
            loss = nn.functional.mse_loss(model(x), y)
            model.zero_grad()
            loss.backward()
            for p in model.parameters():
                p.data.add_(-0.05 * p.grad)   # a hand-written SGD step
        print(loss.item())
    """, watchers=WATCHER)
    assert out.exit_code == 0
    (f,) = out.findings
    assert f.code == "TP490" and f.severity.value == "info" and f.subject == "Sequential"
    assert "no torch.optim optimizer stepped" in f.message and "4 trainable parameters" in f.message
    assert f.path.endswith("train.py") and f.line == 9  # the line that called the model


def test_training_with_an_optimizer_is_silent():
    x, y = _data()
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def train():
        for _ in range(5):
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()

    assert watched(train, WATCHER) == []


def test_inference_only_is_silent():
    x, _ = _data()
    model = nn.Linear(4, 1)

    def infer():
        with torch.no_grad():
            for _ in range(3):
                model(x)

    assert codes(watched(infer, WATCHER)) == []
