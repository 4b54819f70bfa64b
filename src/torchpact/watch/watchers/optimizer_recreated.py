"""An optimizer re-created over parameters another optimizer already stepped: its state is thrown away.

Each optimizer is recorded at its first ``step()`` (its parameter ids, type and defaults, the line
that built it); later steps cost one dict lookup. When a new optimizer steps parameters that an
earlier one stepped and kept state for (Adam's moments, momentum buffers), and the earlier one no
longer steps, the earlier one was replaced. Replacing it once with a different configuration is a
training stage (unfreeze and lower the lr) and stays silent; replacing it with the same
configuration, or again and again (a constructor inside the loop), is reported — unless the new
optimizer's first step drew its batch from a dataset none of the earlier one's steps drew from: a new
task (continual learning resets the optimizer per task on purpose), not the same training restarted.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.watcher import Check
from torchpact.watch.watchers import _sites
from torchpact.watch.watchers._datasets_fed import DatasetsFed, same_dataset

RECREATED = Check(
    code="TP460",
    category=Category.TRAINING,
    severity=Severity.WARNING,
    summary="The optimizer is re-created over parameters already trained: its state (moments, momentum) is lost.",
    doc="""## What it does
At runtime, notices a new optimizer whose parameters an earlier optimizer already stepped and kept
state for, when the earlier one stops stepping. It reports the line that builds the new optimizer
when it is rebuilt with the same type and settings, or rebuilt repeatedly (inside the training
loop). Re-creating an optimizer once with other settings (a new training stage) and building one
for a fresh model are not reported; nor is an optimizer whose first step is fed by a DataLoader over
a dataset that none of the earlier optimizer's steps were fed from (each task of a continual-learning
script gets a fresh optimizer on purpose). The same dataset through a new DataLoader is the same data.

## Why is this bad?
In torch 2.13 an optimizer's state lives in the optimizer object (`optimizer.state`): Adam's first
and second moments and step count, SGD's momentum buffers. A new optimizer starts from zero: Adam
runs its bias-corrected first steps again (large, noisy updates) and never builds the long-term
averages, momentum never accumulates. A constructor inside the epoch loop does this every epoch,
and a learning-rate scheduler bound to the old optimizer stops scheduling the new one.

## How to fix
Create the optimizer (and its scheduler) once, before the training loop; to change the learning
rate, edit `optimizer.param_groups[i]["lr"]` or use a scheduler; to resume, restore
`optimizer.load_state_dict(...)`.""",
)


class _Opt:
    def __init__(self, ref: weakref.ref, params: dict[int, weakref.ref], signature: tuple,
                 site: tuple[str | None, int | None]) -> None:
        self.ref = ref
        self.params = params
        self.signature = signature
        self.site = site
        self.last_step = -1
        self.has_state = False
        self.generation = 0
        self.replaces: list[_Opt] = []
        self.datasets: list[Any] = []   # the datasets that fed its steps (DatasetsFed answers)
        self.first_fed: Any = None      # the one that fed its first step


def _shared(old: _Opt, new: _Opt) -> bool:
    """Whether both hold one same live parameter (ids of freed parameters are reused)."""
    for key in old.params.keys() & new.params.keys():
        p = new.params[key]()
        if p is not None and old.params[key]() is p:
            return True
    return False


def _signature(optimizer: Any) -> tuple:
    simple = tuple(sorted((k, v) for k, v in optimizer.defaults.items()
                          if isinstance(v, (int, float, str, bool, tuple)) or v is None))
    return (type(optimizer).__name__, simple)


class OptimizerRecreated(_sites.SiteWatcher):
    """TP460: an optimizer re-built over parameters already trained."""

    name = "optimizer_recreated"
    checks = (RECREATED,)

    def __init__(self) -> None:
        super().__init__()
        self._opts: dict[int, _Opt] = {}
        self._new: list[_Opt] = []
        self._fed = DatasetsFed()

    def attach(self, session: Any) -> None:
        super().attach(session)
        self._fed.install()

    def on_close(self) -> None:
        self._fed.remove()
        super().on_close()

    def on_step_pre(self, optimizer: Any) -> None:
        rec = self._opts.get(id(optimizer))
        if rec is not None and rec.ref() is optimizer:
            return
        params = {id(p): weakref.ref(p) for g in optimizer.param_groups for p in g["params"]}
        rec = _Opt(weakref.ref(optimizer), params, _signature(optimizer), self.creation_site(optimizer))
        rec.replaces = [old for old in self._opts.values() if old.has_state and _shared(old, rec)]
        self._opts[id(optimizer)] = rec
        if rec.replaces:
            self._new.append(rec)

    def on_step(self, optimizer: Any) -> None:
        rec = self._opts.get(id(optimizer))
        if rec is None:
            return
        first = rec.last_step < 0
        rec.last_step = self.session.step
        if not rec.has_state:
            rec.has_state = bool(optimizer.state)
        dataset = self._fed.feeding()
        if dataset is not None:
            if not any(same_dataset(dataset, d) for d in rec.datasets):
                rec.datasets.append(dataset)
                if len(rec.datasets) > 64:
                    del rec.datasets[0]
            if first:
                rec.first_fed = dataset

    def on_step_end(self, step: int) -> None:
        if not self._new:
            return
        new, self._new = self._new, []
        for rec in new:
            replaced = [old for old in rec.replaces if old.last_step < step or old.ref() is None]
            rec.replaces = []
            if not replaced:
                continue  # both keep stepping: two optimizers on purpose, not a replacement
            for old in replaced:
                for key, value in list(self._opts.items()):
                    if value is old:
                        del self._opts[key]
            if rec.first_fed is not None and not any(same_dataset(rec.first_fed, d) for old in replaced
                                                     for d in old.datasets):
                continue  # other data: a new task, whose optimizer starts afresh on purpose
            rec.generation = max(old.generation for old in replaced) + 1
            same = any(old.signature == rec.signature for old in replaced)
            if same or rec.generation >= 2:
                self._report(rec, replaced[0], same)

    def _report(self, rec: _Opt, old: _Opt, same: bool) -> None:
        path, line = rec.site
        kind = rec.signature[0]
        where = f" at {os.path.basename(path)}:{line}" if path and line else ""
        how = "with the same settings" if same else f"for the {rec.generation + 1}th time"
        self.session.report(
            RECREATED,
            f"a new {kind}{where} was created {how} over parameters the previous optimizer had already "
            f"stepped (last at step {old.last_step}): its state (moment estimates, momentum) is thrown away "
            "and training restarts the optimizer's warm-up",
            subject=kind, path=path, line=line, key=(path, line),
            fix="create the optimizer once, before the training loop; change the lr through param_groups or "
                "a scheduler, and restore optimizer.load_state_dict(...) when resuming")
