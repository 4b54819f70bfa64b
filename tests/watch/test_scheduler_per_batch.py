"""Runtime TP466: an epoch-sized learning-rate schedule stepped once per batch.

Variants written before the watcher was tuned: StepLR, MultiStepLR (positional), CosineAnnealingLR,
ExponentialLR, LambdaLR and PolynomialLR sized in epochs and stepped inside the batch loop, from a
helper, through `next(iter(loader))`, and with persistent workers. Clean twins: the same schedules
stepped per epoch; OneCycleLR, warm-up LinearLR and CosineAnnealingLR / StepLR sized in optimizer steps
and stepped per batch; full-batch training (one batch per epoch); gradient accumulation.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import lr_scheduler as sched_mod
from torch.utils.data import DataLoader, TensorDataset

from tests.watch.util import codes, watched

WATCHER = ["scheduler_per_batch"]
EPOCHS, BATCHES = 6, 8


def _loader(batches=BATCHES, batch_size=4, **kw):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batches * batch_size, 5, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=batch_size, shuffle=True,
                      generator=g, **kw)


def _setup(lr=0.1):
    torch.manual_seed(0)
    model = nn.Linear(5, 1)
    return model, torch.optim.SGD(model.parameters(), lr=lr)


def _step(model, opt, x, y):
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    opt.step()


def _per_batch(make, epochs=EPOCHS, batches=BATCHES, **loader_kw):
    def run():
        model, opt = _setup()
        sched = make(opt)
        loader = _loader(batches, **loader_kw)
        for _ in range(epochs):
            for x, y in loader:
                _step(model, opt, x, y)
                sched.step()
    return run


def _per_epoch(make, epochs=EPOCHS):
    def run():
        model, opt = _setup()
        sched = make(opt)
        loader = _loader()
        for _ in range(epochs):
            for x, y in loader:
                _step(model, opt, x, y)
            sched.step()
    return run


def _tp466(findings):
    return [f for f in findings if f.code == "TP466"]


def test_the_bug_is_real_on_this_torch():
    """StepLR(step_size=epochs // 2) stepped per batch: the lr is ~0 after a fraction of the first epochs."""
    model, opt = _setup()
    sched = sched_mod.StepLR(opt, step_size=EPOCHS // 2, gamma=0.1)
    for _ in range(EPOCHS * BATCHES):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] < 1e-15


@pytest.mark.parametrize("make", [
    lambda opt: sched_mod.StepLR(opt, step_size=EPOCHS // 2, gamma=0.1),
    lambda opt: sched_mod.MultiStepLR(opt, [EPOCHS // 2, 3 * EPOCHS // 4]),   # ends at lr/100: no collapse
    lambda opt: sched_mod.CosineAnnealingLR(opt, T_max=EPOCHS),               # cycles every 2 * T_max batches
    lambda opt: sched_mod.PolynomialLR(opt, total_iters=EPOCHS, power=1.0),   # lr 0 from batch 6 on
], ids=["StepLR", "MultiStepLR", "CosineAnnealingLR", "PolynomialLR"])
def test_epoch_schedules_stepped_per_batch_are_warnings(make):
    [f] = _tp466(watched(_per_batch(make), WATCHER))
    assert f.severity.value == "warning"
    assert f.path.endswith("test_scheduler_per_batch.py") and "per epoch" in f.fix


@pytest.mark.parametrize("make", [
    lambda opt: sched_mod.ExponentialLR(opt, 0.9),
    lambda opt: sched_mod.LambdaLR(opt, lambda epoch: 0.9 ** epoch),
], ids=["ExponentialLR", "LambdaLR"])
def test_decays_without_a_horizon_are_found_by_the_collapse(make):
    [f] = _tp466(watched(_per_batch(make, epochs=10, batches=30), WATCHER))
    assert f.severity.value == "warning" and "fell below a millionth" in f.message


def test_from_a_helper_with_next_over_an_iterator_and_persistent_workers():
    def train_one_epoch(model, opt, scheduler, loader):
        it = iter(loader)
        for _ in range(len(loader)):
            x, y = next(it)
            _step(model, opt, x, y)
            scheduler.step()

    def run():
        model, opt = _setup()
        scheduler = sched_mod.StepLR(opt, 2, 0.5)
        loader = _loader(persistent_workers=True, num_workers=1)
        for _ in range(EPOCHS):
            train_one_epoch(model, opt, scheduler, loader)

    [f] = _tp466(watched(run, WATCHER))
    assert "StepLR" in f.message


@pytest.mark.parametrize("make", [
    lambda opt: sched_mod.StepLR(opt, step_size=EPOCHS // 2, gamma=0.1),
    lambda opt: sched_mod.MultiStepLR(opt, [EPOCHS // 2, 3 * EPOCHS // 4]),
    lambda opt: sched_mod.CosineAnnealingLR(opt, T_max=EPOCHS),
    lambda opt: sched_mod.ExponentialLR(opt, 0.5),
], ids=["StepLR", "MultiStepLR", "CosineAnnealingLR", "ExponentialLR"])
def test_the_same_schedules_stepped_per_epoch_are_silent(make):
    assert codes(watched(_per_epoch(make), WATCHER)) == []


@pytest.mark.parametrize("make", [
    lambda opt: sched_mod.OneCycleLR(opt, max_lr=0.1, total_steps=EPOCHS * BATCHES),
    lambda opt: sched_mod.CosineAnnealingLR(opt, T_max=EPOCHS * BATCHES),
    lambda opt: sched_mod.StepLR(opt, step_size=2 * BATCHES, gamma=0.5),   # "every 2 epochs", in steps
    lambda opt: sched_mod.LinearLR(opt, start_factor=0.1, total_iters=5),  # warm-up over 5 steps
    lambda opt: sched_mod.LambdaLR(opt, lambda s: 1 - s / (EPOCHS * BATCHES)),  # linear decay to 0 at the end
], ids=["OneCycleLR", "Cosine-in-steps", "StepLR-in-steps", "LinearLR-warmup", "LambdaLR-linear-to-0"])
def test_schedules_sized_in_steps_stepped_per_batch_are_silent(make):
    assert codes(watched(_per_batch(make), WATCHER)) == []


def test_full_batch_training_one_batch_per_epoch_is_silent():
    assert codes(watched(_per_batch(lambda opt: sched_mod.StepLR(opt, 3, 0.1), epochs=60, batches=1,
                                    batch_size=32), WATCHER)) == []


def test_gradient_accumulation_with_a_per_step_schedule_is_silent():
    def run():
        model, opt = _setup()
        sched = sched_mod.CosineAnnealingLR(opt, T_max=EPOCHS * BATCHES // 2)
        loader = _loader()
        for _ in range(EPOCHS):
            for i, (x, y) in enumerate(loader):
                (F.mse_loss(model(x), y) / 2).backward()
                if i % 2 == 1:
                    opt.step()
                    opt.zero_grad()
                    sched.step()

    assert codes(watched(run, WATCHER)) == []


def _manual(make, epochs=EPOCHS, batches=BATCHES, per_batch=True, how="slice"):
    """Batches cut from in-memory tensors, without a DataLoader."""
    def run():
        model, opt = _setup()
        sched = make(opt)
        g = torch.Generator().manual_seed(0)
        x = torch.randn(batches * 4, 5, generator=g)
        y = x.sum(1, keepdim=True)
        for _ in range(epochs):
            if how == "slice":
                for start in range(0, len(x), 4):
                    _step(model, opt, x[start:start + 4], y[start:start + 4])
                    if per_batch:
                        sched.step()
            else:  # a shuffled index, consumed in a while loop
                order, i = torch.randperm(len(x), generator=g), 0
                while i < len(x):
                    idx = order[i:i + 4]
                    _step(model, opt, x[idx], y[idx])
                    i += 4
                    if per_batch:
                        sched.step()
            if not per_batch:
                sched.step()
    return run


def test_without_a_dataloader_the_collapse_alone_is_reported():
    [f] = _tp466(watched(_manual(lambda opt: sched_mod.StepLR(opt, EPOCHS // 2, 0.1)), WATCHER))
    assert f.severity.value == "warning" and "no DataLoader" in f.message
    found = _tp466(watched(_manual(lambda opt: sched_mod.ExponentialLR(opt, 0.9), epochs=10, batches=30,
                                   how="index"), WATCHER))
    assert len(found) == 1


def test_without_a_dataloader_other_signs_are_not_enough():
    """Epochs unknown: a horizon passed early or a cosine cycling is no verdict without the collapse."""
    for make in (lambda opt: sched_mod.MultiStepLR(opt, [EPOCHS // 2, 3 * EPOCHS // 4]),
                 lambda opt: sched_mod.CosineAnnealingLR(opt, T_max=EPOCHS)):
        assert codes(watched(_manual(make), WATCHER)) == []


def test_without_a_dataloader_clean_twins_are_silent():
    assert codes(watched(_manual(lambda opt: sched_mod.StepLR(opt, 2, 0.1), per_batch=False), WATCHER)) == []
    assert codes(watched(_manual(lambda opt: sched_mod.CosineAnnealingLR(opt, EPOCHS * BATCHES)), WATCHER)) == []
    # full-batch training, a schedule stepped per step = per epoch, decaying moderately
    assert codes(watched(_manual(lambda opt: sched_mod.ExponentialLR(opt, 0.99), epochs=200, batches=1),
                         WATCHER)) == []


def _with_validation(make, per_batch, train_loader):
    """A validation DataLoader iterated every epoch, beside the training batches."""
    def run():
        model, opt = _setup()
        sched = make(opt)
        val, train = _loader(3), _loader()
        g = torch.Generator().manual_seed(1)
        x = torch.randn(BATCHES * 4, 5, generator=g)
        for _ in range(EPOCHS):
            batches = train if train_loader else ((x[i:i + 4], x[i:i + 4].sum(1, keepdim=True))
                                                  for i in range(0, len(x), 4))
            for xb, yb in batches:
                _step(model, opt, xb, yb)
                if per_batch:
                    sched.step()
            if not per_batch:
                sched.step()
            with torch.no_grad():
                for xv, _ in val:
                    model(xv)
    return run


def test_a_validation_loader_is_not_taken_for_the_epochs():
    step_lr = lambda opt: sched_mod.MultiStepLR(opt, [EPOCHS // 2, 3 * EPOCHS // 4])  # noqa: E731
    [f] = _tp466(watched(_with_validation(step_lr, True, train_loader=True), WATCHER))
    assert f"epochs of {BATCHES} batches" in f.message
    assert codes(watched(_with_validation(step_lr, False, train_loader=True), WATCHER)) == []
    collapse = lambda opt: sched_mod.StepLR(opt, EPOCHS // 2, 0.1)  # noqa: E731
    [f] = _tp466(watched(_with_validation(collapse, True, train_loader=False), WATCHER))
    assert "no DataLoader" in f.message
    assert codes(watched(_with_validation(collapse, False, train_loader=False), WATCHER)) == []
