"""An epoch-sized learning-rate schedule stepped once per batch.

torch's schedulers count their ``step()`` calls (``last_epoch``) and know nothing of epochs: a schedule
sized in epochs (``StepLR(step_size=epochs // 2)``, ``CosineAnnealingLR(T_max=epochs)``,
``MultiStepLR(milestones=[30, 60])``, ``ExponentialLR(gamma=0.95)``) and stepped after every optimizer
step runs through in as many batches.

What is observed, at no cost per batch:

- the schedulers, as they are created (``LRScheduler.__init__`` is wrapped for the run), with their
  optimizer and their horizon (``step_size``, the last milestone, ``T_max``, ``total_iters``, ``T_0``);
- at each optimizer step, each of its schedulers' ``last_epoch`` and the optimizer's lr (attribute reads);
- the passes over each DataLoader (``_BaseDataLoaderIter.__init__`` and ``_reset`` are wrapped: a new
  iterator, or a persistent one restarted): the epochs; at each step of an optimizer that has a scheduler,
  which live iterator moved since its last step says which loader feeds it (a validation loader does not).

A scheduler is *stepped per batch* when, over the passes of the loader that feeds its optimizer (at least
two optimizer steps a pass), it stepped at least 0.9 times per optimizer step. It is reported (once) when
it is, and the run shows that its schedule was sized in epochs:

- the lr fell to a millionth of its initial value or less within the first half of the optimizer steps
  so far, and stayed there;
- a ``CosineAnnealingLR`` went through a whole period (``2 * T_max`` steps) inside one epoch's batches;
- its horizon is shorter than one epoch's batches, was reached, and is no larger than the number of
  epochs the run trained (sized for this run's epochs).

Schedules that are per-step by design (``OneCycleLR``, ``CyclicLR``, warm-up ``LinearLR`` /
``ConstantLR``), ``ReduceLROnPlateau`` and the composite ``SequentialLR`` / ``ChainedScheduler`` are left
out (the schedulers they hold are watched on their own). When no DataLoader feeds the optimizer (batches cut
from tensors by hand) the epochs are unknown, and only the collapse of the lr, with a scheduler stepped at
every optimizer step for at least 20 steps, is reported.
"""

from __future__ import annotations

import weakref
from itertools import pairwise
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.median import median
from torchpact.watch.frames import user_location
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers._patch import Patch, remove_all

PER_BATCH = 0.9      # scheduler steps per optimizer step, within the passes
COLLAPSE = 1e-6      # lr / initial lr at or below this: training has stopped
MIN_STEPS = 20       # optimizer steps before a run without a DataLoader is judged
EXCLUDED = frozenset({"OneCycleLR", "CyclicLR", "LinearLR", "ConstantLR", "ReduceLROnPlateau", "SequentialLR",
                      "ChainedScheduler", "SWALR"})

EPOCH_SCHEDULER_PER_BATCH = Check(
    code="TP466",
    category=Category.TRAINING,
    severity=Severity.WARNING,
    summary="A learning-rate schedule sized in epochs is stepped once per batch: it runs through in a few batches.",
    doc="""## What it does
At runtime, watches every learning-rate scheduler (`torch.optim.lr_scheduler.*`) with its optimizer,
and the passes over each `DataLoader`. It reports a scheduler that is stepped after every optimizer
step (at least 0.9 `scheduler.step()` per optimizer step, within passes of two batches or more) when
the run also shows that its schedule is sized in epochs:

- the learning rate fell to a millionth of its initial value or less within the first half of the
  steps, and stayed there (`StepLR`, `ExponentialLR`, `LambdaLR`, `PolynomialLR`, ...);
- a `CosineAnnealingLR` went through a whole period (`2 * T_max` steps) within one epoch's batches;
- its horizon (`step_size`, the last milestone, `T_max`, `total_iters`, `T_0`) is shorter than one
  epoch's batches, was reached, and is no larger than the number of epochs the run trained.

Schedules that are per-step by design (`OneCycleLR`, `CyclicLR`, warm-up `LinearLR` / `ConstantLR`) and
`ReduceLROnPlateau` are not checked. When no DataLoader feeds the optimizer (batches sliced from tensors
by hand), the epochs are unknown and only the collapse of the learning rate counts. A DataLoader whose
passes hold one optimizer step each (full-batch training) is per-epoch stepping, and silent.

## Why is this bad?
A torch scheduler counts its `step()` calls and knows nothing of epochs. `StepLR(opt, step_size=epochs
// 2)` is meant to decay once, half-way through training; stepped after every batch, it multiplies the
learning rate by `gamma` every `epochs // 2` batches — after a few hundred batches the learning rate is
1e-20 or smaller and the model stops learning while the loop keeps running (Lornatang/SRGAN-PyTorch#1).
A `CosineAnnealingLR(T_max=epochs)` stepped per batch oscillates between its maximum and minimum every
`2 * T_max` batches; `MultiStepLR` milestones are all passed in the first epoch. Nothing raises.

## How to fix
Call `scheduler.step()` once per epoch, after the loop over the DataLoader — or keep stepping per batch
and size the schedule in optimizer steps (`step_size=k * len(loader)`, `T_max=epochs * len(loader)`,
milestones multiplied by `len(loader)`), or use a per-step schedule such as `OneCycleLR(total_steps=...)`.""",
)


class _Sched:
    """What is known about one scheduler."""

    def __init__(self, sched: Any, optimizer: Any, horizon: tuple[str, int, str] | None, site: tuple) -> None:
        self.ref = weakref.ref(sched)
        self.cls = type(sched).__name__
        self.optimizer = weakref.ref(optimizer)
        self.optimizer_id = id(optimizer)
        self.horizon = horizon
        self.site = site
        self.last_epoch = self.first_epoch = sched.last_epoch
        self.steps = 0            # optimizer steps seen since the scheduler exists
        self.initial = _initial_lr(optimizer)
        self.collapsed_at: int | None = None   # the step since which the lr is <= COLLAPSE * initial
        self.lr = self.initial
        self.bounds: list[tuple[int, int, int]] = []   # (loader id, steps, last_epoch) at each pass start
        self.done = False


def _initial_lr(optimizer: Any) -> float:
    group = optimizer.param_groups[0]
    return float(group.get("initial_lr", group["lr"]))


def _horizon(sched: Any) -> tuple[str, int, str] | None:
    """What sizes the schedule: (its name, its length in scheduler steps, how it was given); None without one."""
    name = type(sched).__name__
    try:
        if name == "StepLR":
            return "step_size", int(sched.step_size), f"step_size={sched.step_size}"
        if name == "MultiStepLR":
            milestones = sorted(sched.milestones)
            return "last milestone", int(milestones[-1]), f"milestones={milestones}"
        if name == "CosineAnnealingLR":
            return "T_max", int(sched.T_max), f"T_max={sched.T_max}"
        if name == "PolynomialLR":
            return "total_iters", int(sched.total_iters), f"total_iters={sched.total_iters}"
        if name == "CosineAnnealingWarmRestarts":
            return "T_0", int(sched.T_0), f"T_0={sched.T_0}"
    except (AttributeError, TypeError, ValueError, IndexError):
        return None
    return None


class SchedulerPerBatch(Watcher):
    """TP466: a schedule sized in epochs stepped once per batch."""

    name = "scheduler_per_batch"
    checks = (EPOCH_SCHEDULER_PER_BATCH,)

    def __init__(self) -> None:
        super().__init__()
        self._by_optimizer: dict[int, list[_Sched]] = {}
        self._all: list[_Sched] = []
        self._live: list[list] = []                     # [iterator, loader id, batches it had yielded]
        self._fed: dict[tuple[int, int], int] = {}      # (optimizer id, loader id) -> steps it fed
        self._patches: list[Patch] = []

    def attach(self, session: Any) -> None:
        super().attach(session)
        from torch.optim.lr_scheduler import LRScheduler
        from torch.utils.data import dataloader

        self._patches.append(Patch(LRScheduler, "__init__", self._wrap_init))
        self._patches.append(Patch(dataloader._BaseDataLoaderIter, "__init__", self._wrap_iter_init))
        self._patches.append(Patch(dataloader._BaseDataLoaderIter, "_reset", self._wrap_reset))

    def on_close(self) -> None:
        remove_all(self._patches)
        for s in self._all:
            self._judge(s)

    # ------------------------------------------------------------------ wrappers
    def _wrap_init(self, original: Any) -> Any:
        def __init__(sched: Any, *args: Any, **kwargs: Any) -> None:
            original(sched, *args, **kwargs)
            if not self.session.closed:
                try:
                    self._created(sched)
                except Exception:  # observing must never break the script
                    pass
        return __init__

    def _wrap_iter_init(self, original: Any) -> Any:
        def __init__(iterator: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
            original(iterator, loader, *args, **kwargs)
            if not self.session.closed:
                self._pass_started(loader, iterator)
        return __init__

    def _wrap_reset(self, original: Any) -> Any:
        def _reset(iterator: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(iterator, *args, **kwargs)
            first = kwargs.get("first_iter", args[1] if len(args) > 1 else False)
            if args and not first and not self.session.closed:  # a persistent iterator restarted: a new pass
                self._pass_started(args[0], iterator)
            return result
        return _reset

    def _created(self, sched: Any) -> None:
        cls = type(sched).__name__
        optimizer = getattr(sched, "optimizer", None)
        if cls in EXCLUDED or optimizer is None or not getattr(optimizer, "param_groups", None):
            return
        s = _Sched(sched, optimizer, _horizon(sched), user_location(3))
        self._all.append(s)
        self._by_optimizer.setdefault(id(optimizer), []).append(s)

    def _pass_started(self, loader: Any, iterator: Any) -> None:
        live = [e for e in self._live if e[0]() is not None and e[0]() is not iterator]
        self._live = [*live[-7:], [weakref.ref(iterator), id(loader), getattr(iterator, "_num_yielded", 0)]]
        for s in self._all:
            sched = s.ref()
            if sched is None or s.done:
                continue
            s.bounds.append((id(loader), s.steps, sched.last_epoch))
            n = len(s.bounds)
            if n > 4096:
                del s.bounds[1:2048]  # a run of very many short passes: keep the first and the recent ones
            if n < 64 or n % 64 == 0:  # judging reads every pass: not at each of thousands of short ones
                self._judge(s)

    # ------------------------------------------------------------------ each optimizer step
    def on_step(self, optimizer: Any) -> None:
        scheds = self._by_optimizer.get(id(optimizer))
        if not scheds:
            return
        fed = None
        for entry in self._live:  # which loader's iterator moved since the last step fed this one
            it = entry[0]()
            n = getattr(it, "_num_yielded", 0) if it is not None else entry[2]
            if n != entry[2]:
                entry[2], fed = n, entry[1]
        if fed is not None:
            key = (id(optimizer), fed)
            self._fed[key] = self._fed.get(key, 0) + 1
        lr = optimizer.param_groups[0]["lr"]
        for s in scheds:
            sched = s.ref()
            if sched is None or s.done or s.optimizer() is not optimizer:
                continue
            s.steps += 1
            s.last_epoch = sched.last_epoch
            s.lr = lr
            if s.initial > 0 and lr <= COLLAPSE * s.initial:
                if s.collapsed_at is None:
                    s.collapsed_at = s.steps
            else:
                s.collapsed_at = None

    # ------------------------------------------------------------------ the verdict
    def _passes(self, s: _Sched) -> list[tuple[int, int]] | None:
        """(optimizer steps, scheduler steps) of each pass over the loader that fed most of the optimizer's
        steps; the pass under way counts with what it has done so far. None when no loader fed it."""
        fed = {loader: n for (opt, loader), n in self._fed.items() if opt == s.optimizer_id}
        if not fed:
            return None
        feeder = max(fed, key=fed.__getitem__)
        sched = s.ref()
        now = (s.steps, sched.last_epoch if sched is not None else s.last_epoch)  # gone: its last step's value
        points = [(steps, epoch) for loader, steps, epoch in s.bounds if loader == feeder]
        points.append(now)
        return [(b[0] - a[0], b[1] - a[1]) for a, b in pairwise(points)]

    def _judge(self, s: _Sched) -> None:
        if s.done:
            return
        sched = s.ref()
        if sched is not None:
            s.last_epoch = sched.last_epoch
        every = self._passes(s)
        if every is None:
            self._judge_without_epochs(s)
            return
        passes = [p for p in every if p[0] >= 2]
        if not passes:
            return  # one optimizer step per pass (full-batch training): per batch is per epoch
        optimizer_steps = sum(p[0] for p in passes)
        sched_steps = sum(max(p[1], 0) for p in passes)
        if sched_steps < PER_BATCH * optimizer_steps:
            return
        trained = [p for p in every if p[0] >= 1]
        complete = [p[0] for p in passes[:-1]] or [passes[-1][0]]
        per_epoch = int(median(complete))
        why = self._evidence(s, per_epoch, len(trained))
        if why is None:
            return
        s.done = True
        self._report(s, per_epoch, why)

    def _judge_without_epochs(self, s: _Sched) -> None:
        """No DataLoader feeds the optimizer: the epochs are unknown, and only a collapse of the lr is evidence."""
        if s.steps < MIN_STEPS or s.last_epoch - s.first_epoch < PER_BATCH * s.steps:
            return
        why = self._collapse(s)
        if why is not None:
            s.done = True
            self._report(s, None, why)

    @staticmethod
    def _collapse(s: _Sched) -> str | None:
        if s.collapsed_at is None or s.collapsed_at > s.steps / 2:
            return None
        now = "exactly 0" if s.lr == 0 else f"{s.lr:.3g}"
        return (f"the learning rate fell below a millionth of its initial {s.initial:g} at optimizer step "
                f"{s.collapsed_at} of {s.steps} and has stayed there ({now} now): the model stopped learning")

    def _evidence(self, s: _Sched, per_epoch: int, epochs: int) -> str | None:
        collapse = self._collapse(s)
        if collapse is not None:
            return collapse
        if s.horizon is None:
            return None
        param, horizon, _ = s.horizon
        if horizon <= 0 or horizon >= per_epoch or s.last_epoch < horizon:
            return None
        if s.cls == "CosineAnnealingLR" and s.last_epoch >= 2 * horizon:
            cycles = s.last_epoch / (2 * horizon)
            return (f"its cosine ({param}={horizon}) goes from the initial lr to its minimum and back every "
                    f"{2 * horizon} batches, {cycles:.3g} times so far, within epochs of {per_epoch} batches")
        if horizon <= epochs:
            return (f"its {param} ({horizon}) is within the {epochs} epochs this run trained, yet it was passed after "
                    f"{horizon} batches, in the first epoch of {per_epoch}")
        return None

    def _report(self, s: _Sched, per_epoch: int | None, why: str) -> None:
        sized = f"({s.horizon[2]})" if s.horizon else ""
        if per_epoch is None:
            text = (f"{s.cls}{sized} is stepped after every optimizer step (no DataLoader feeds its optimizer: the "
                    f"epochs are unknown) and {why} — a schedule sized in epochs, stepped once per batch?")
        else:
            text = (f"{s.cls}{sized} is stepped after every optimizer step (epochs of {per_epoch} batches), but its "
                    f"schedule is sized in epochs: {why}")
        self.session.report(
            EPOCH_SCHEDULER_PER_BATCH, text,
            subject=s.cls, path=s.site[0], line=s.site[1], key=("sched", id(s)),
            scheduler_steps=s.last_epoch, optimizer_steps=s.steps, batches_per_epoch=per_epoch,
            fix="call scheduler.step() once per epoch, after the loop over the DataLoader, or size the schedule in "
                "optimizer steps (step_size / T_max / milestones times len(loader); OneCycleLR(total_steps=...))")
