"""``train()`` / ``eval()`` overrides that set up training state, and never ran before training.

Libraries (mmpretrain, mmdet, timm wrappers) and users override ``nn.Module.train(mode)`` to freeze
stages, set ``requires_grad`` or switch sub-modules to eval. A module starts in train mode without
``train()`` ever being called, so when the script never calls ``model.train()`` the override never
runs: the stages it freezes train anyway (mmpretrain#702). ``nn.Module.train`` is wrapped to record
which modules went through it (a parent's ``train()`` reaches every child); at the first
``optimizer.step()`` the modules of the trained models whose class overrides ``train`` with such
state changes, and whose ``train`` never ran, are reported.

What the override would change is read from its source and from what it calls (``_setup_code``),
with the module's own configuration (``frozen_stages=-1``, ``norm_eval=False`` switch mmpretrain's
set-up off). A module is reported when that set-up is missing: none of its sub-modules is in eval mode
although the override would put some there, or none of its parameters is frozen although the override
would freeze some. A set-up already made elsewhere (in ``__init__``, by the script) is in effect, and
stays silent.
"""

from __future__ import annotations

import inspect
import os
import weakref
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers import _setup_code
from torchpact.watch.watchers._patch import Patch, remove_all

OVERRIDE_NEVER_RAN = Check(
    code="TP457",
    category=Category.TRAINING,
    severity=Severity.WARNING,
    summary="A module's train() override freezes or switches layers, but train() never ran before training.",
    doc="""## What it does
At runtime, at the first `optimizer.step()`, looks at the modules of the models being trained whose
class overrides `train(mode)` with code that changes training state — puts sub-modules in eval mode
(`m.eval()`, `m.train(False)`), sets `requires_grad` / calls `requires_grad_()` — directly or through
what it calls: its own helper methods, `self.apply(set_bn_eval)`, a loop over `self.modules()`, a
lambda — with the module's own configuration (an override whose freezing is switched off by
`frozen_stages=-1` changes nothing). When `train()` never ran on such a module (nor on a parent, which
would have reached it) and the set-up is missing — no sub-module in eval mode although the override
would put some there, no frozen parameter although it would freeze some — it reports the module, the
class and the line of the override. A set-up already made elsewhere (in `__init__`, by the script)
shows, and is not reported.

## Why is this bad?
A module is created in train mode (`training=True`) in torch 2.13; nothing calls `train()` for you.
A script that never calls `model.train()` (only `model.eval()` later, for validation) trains with
the override's set-up missing: stages meant to stay frozen are updated, BatchNorm layers meant to
stay in eval mode update their statistics. Nothing raises and the run looks normal
(open-mmlab/mmpretrain#702: `frozen_stages` had no effect).

## How to fix
Call `model.train()` before the training loop (and after every validation pass), or do the set-up
in `__init__` as well.""",
)


def _override_site(cls: type) -> tuple[str | None, int | None] | None:
    """(file, line) of ``cls.train`` when it is a Python override of ``nn.Module.train``, else None."""
    import torch.nn as nn

    train = getattr(cls, "train", None)
    if train is None or train is nn.Module.train or not inspect.isfunction(train) or _setup_code.is_torch(train):
        return None
    try:
        return inspect.getsourcefile(train), inspect.getsourcelines(train)[1]
    except (OSError, TypeError):
        return None, None


def _missing(module: Any, kinds: set[str]) -> bool:
    """Whether none of the effects of a kind of set-up shows on ``module``: no sub-module in eval mode for
    ``eval``, no frozen parameter for ``requires_grad``, neither for a ``freeze`` helper. A set-up done
    elsewhere (in ``__init__``, by the script) shows."""
    evals = any(not m.training for m in module.modules())
    frozen = any(not p.requires_grad for p in module.parameters())
    return (("eval" in kinds and not evals) or ("requires_grad" in kinds and not frozen)
            or ("freeze" in kinds and not (evals or frozen)))


class TrainOverride(Watcher):
    """TP457: ``train()`` overrides with set-up that never ran before the first step."""

    name = "train_override"
    checks = (OVERRIDE_NEVER_RAN,)

    def __init__(self) -> None:
        super().__init__()
        self._patches: list[Patch] = []
        self._ran: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._checked = False
        self._classes: dict[type, Any] = {}

    def attach(self, session: Any) -> None:
        super().attach(session)
        import torch.nn as nn

        self._patches.append(Patch(nn.Module, "train", self._wrap_train))

    def on_close(self) -> None:
        remove_all(self._patches)

    def _wrap_train(self, original: Any) -> Any:
        ran = self._ran

        def train(module: Any, mode: bool = True) -> Any:
            ran.add(module)
            return original(module, mode)
        return train

    def on_step_pre(self, optimizer: Any) -> None:
        if self._checked:
            return
        self._checked = True
        # only the train() calls made before the first step count: later ones go straight to torch (a script that
        # switches modes at every step, as stable-baselines3 does, called the wrapper once per sub-module)
        remove_all(self._patches)
        held = {id(p) for g in optimizer.param_groups for p in g["params"]}
        for root in self.session.names.root_modules():
            if any(id(p) in held for p in root.parameters()):
                self._check_root(root)
        self._ran = weakref.WeakSet()

    def _check_root(self, root: Any) -> None:
        ran = self._ran
        reached: set[int] = set()
        for module in root.modules():
            if id(module) in reached or module in ran:
                reached.update(id(m) for m in module.modules())  # a parent's train() reached every child
                continue
            site = self._site(type(module))
            if site is None:
                continue
            kinds = _setup_code.changes(type(module).train, module)
            if not kinds or not _missing(module, kinds):
                continue
            path, line = site
            name = self.session.names.module(module)
            cls = type(module).__name__
            where = f" ({os.path.basename(path)}:{line})" if path and line else ""
            self.session.report(
                OVERRIDE_NEVER_RAN,
                f"`{name}` ({cls}) overrides train(){where} to change training state (freeze stages, "
                "requires_grad or eval sub-modules), but train() never ran on it before the first optimizer "
                "step: that set-up is not in effect and the layers it should freeze or switch are trained",
                subject=name, path=path, line=line, key=cls,
                fix="call model.train() before the training loop (and after each validation pass)")

    def _site(self, cls: type) -> Any:
        if cls not in self._classes:
            self._classes[cls] = _override_site(cls)
        return self._classes[cls]
