"""The PyTorch Lightning callback, with the real library on tiny models."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

L = pytest.importorskip("lightning.pytorch", reason="lightning is a test dependency (requirements-dev.txt)")

from torchpact.integrations.lightning import TorchpactCallback  # noqa: E402


def _hooks() -> int:
    import torch.nn.modules.module as m
    import torch.optim.optimizer as o

    return (len(m._global_forward_hooks) + len(m._global_forward_pre_hooks) + len(o._global_optimizer_pre_hooks)
            + len(o._global_optimizer_post_hooks))


class Classifier(L.LightningModule):
    def __init__(self, probabilities: bool = False, fail_at: int | None = None):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        self.probabilities, self.fail_at = probabilities, fail_at

    def training_step(self, batch, index):
        if self.fail_at is not None and index == self.fail_at:
            raise RuntimeError("boom in training_step")
        x, y = batch
        out = self.net(x)
        if self.probabilities:  # the bug: cross_entropy applies log_softmax itself
            out = torch.softmax(out, dim=-1)
        return F.cross_entropy(out, y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader():
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(96, 8, generator=g), torch.randint(0, 4, (96,), generator=g))
    return DataLoader(data, batch_size=8)


def _trainer(cb, steps=8):
    return L.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, callbacks=[cb] if cb else [])


def test_fit_is_watched_and_findings_handed_over(tmp_path):
    before = _hooks()
    cb = TorchpactCallback(report=str(tmp_path / "report.json"), html=str(tmp_path / "report.html"), live=False)
    _trainer(cb).fit(Classifier(probabilities=True), _loader())
    assert _hooks() == before
    assert "TP301" in {f.code for f in cb.findings}
    assert cb.fit.steps == 8 and len(cb.data["progress"]["step_time"]) == 8
    assert [s for s, _ in cb.data["progress"]["loss"]] == list(range(8))  # training_step's F.cross_entropy
    assert {"0", "2"} <= set(cb.data["grad_health"]["series"])  # named from the module the step calls: self.net
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["command"] == "lightning fit" and any(f["code"] == "TP301" for f in doc["findings"])
    assert "Gradient norm per layer" in (tmp_path / "report.html").read_text()


def test_clean_fit_is_silent():
    cb = TorchpactCallback(live=False)
    _trainer(cb, steps=6).fit(Classifier(), _loader())
    assert cb.findings == [] and cb.fit.steps == 6


def test_failed_fit_removes_the_hooks(tmp_path):
    before = _hooks()
    cb = TorchpactCallback(report=str(tmp_path / "r.json"), live=False)
    with pytest.raises(RuntimeError, match="boom"):
        _trainer(cb).fit(Classifier(fail_at=3), _loader())
    assert _hooks() == before and not cb.fit.active
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["summary"]["error"].startswith("RuntimeError: boom") and doc["summary"]["steps"] == 3


def test_automatic_optimization_step_pre_sees_this_steps_gradients():
    # Lightning's automatic optimization calls `optimizer.step(closure)`, and the closure runs the
    # training_step, zero_grad and backward: torch's step pre-hooks fire before it. The session delivers
    # on_step_pre once the closure has returned, so the watchers read this step's gradients
    import torchpact
    from torchpact.watch import Watcher

    class Seen(Watcher):
        name = "seen"

        def __init__(self) -> None:
            super().__init__()
            self.pre: list[torch.Tensor | None] = []
            self.post: list[torch.Tensor] = []

        def on_step_pre(self, optimizer):
            g = optimizer.param_groups[0]["params"][0].grad
            self.pre.append(None if g is None else g.clone())

        def on_step(self, optimizer):
            self.post.append(optimizer.param_groups[0]["params"][0].grad.clone())

    seen = Seen()
    trainer = L.Trainer(max_steps=3, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    with torchpact.watch([seen]):
        trainer.fit(Classifier(), _loader())
    assert len(seen.pre) == len(seen.post) == 3
    for step in range(3):
        assert seen.pre[step] is not None and torch.equal(seen.pre[step], seen.post[step])
    assert not torch.equal(seen.post[0], seen.post[1])


class PartlyOptimized(L.LightningModule):
    """The optimizer is built from `net` only, while `head` trains too (TP451): Lightning, not this file,
    calls step(), so the finding must point at the line here that builds the optimizer."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU())
        self.head = torch.nn.Linear(32, 4)

    def training_step(self, batch, index):
        x, y = batch
        return F.cross_entropy(self.head(self.net(x)), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.net.parameters(), lr=0.1)  # BUILDS-THE-OPTIMIZER


def _line_of(marker: str) -> int:
    return next(i for i, text in enumerate(open(__file__).read().splitlines(), 1)
                if marker in text and "def " not in text and "_line_of" not in text)


def test_an_optimizer_finding_under_the_callback_points_at_configure_optimizers():
    cb = TorchpactCallback(live=False)
    _trainer(cb).fit(PartlyOptimized(), _loader())
    [f] = [f for f in cb.findings if f.code == "TP451"]
    assert (f.path, f.line) == (__file__, _line_of("# BUILDS-THE-OPTIMIZER")), f


def test_an_optimizer_finding_under_a_plain_watch_points_at_configure_optimizers():
    import torchpact

    with torchpact.watch(live=False) as w:  # what `torchpact run` does around a Lightning script
        _trainer(None).fit(PartlyOptimized(), _loader())
    [f] = [f for f in w.findings if f.code == "TP451"]
    assert (f.path, f.line) == (__file__, _line_of("# BUILDS-THE-OPTIMIZER")), f
