"""``train()`` / ``eval()`` overrides that set up training state, and never ran before training.

Libraries (mmpretrain, mmdet, timm wrappers) and users override ``nn.Module.train(mode)`` to freeze
stages, set ``requires_grad`` or switch sub-modules to eval. A module starts in train mode without
``train()`` ever being called, so when the script never calls ``model.train()`` the override never
runs: the stages it freezes train anyway (mmpretrain#702). ``nn.Module.train`` is wrapped to record
which modules went through it (a parent's ``train()`` reaches every child); at the first
``optimizer.step()`` the modules of the trained models whose class overrides ``train`` with such
state changes, and whose ``train`` never ran, are reported. Overrides whose set-up ``__init__``
already runs (``self._freeze_stages()`` in both) are not.
"""

from __future__ import annotations

import ast
import inspect
import os
import textwrap
import weakref
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers._patch import Patch, remove_all

_STATE_WORDS = ("requires_grad", "freeze", "eval(", "train(False)", ".train(mode=False)")

OVERRIDE_NEVER_RAN = Check(
    code="TP457",
    category=Category.TRAINING,
    severity=Severity.WARNING,
    summary="A module's train() override freezes or switches layers, but train() never ran before training.",
    doc="""## What it does
At runtime, at the first `optimizer.step()`, looks at the modules of the models being trained whose
class overrides `train(mode)` with code that changes training state (freezes stages, sets
`requires_grad`, puts sub-modules in eval mode). When `train()` never ran on such a module (nor on
a parent, which would have reached it), it reports the module, the class and the line of the
override. Classes whose `__init__` already does the same set-up are not reported.

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


def _override_source(cls: type) -> tuple[str, str | None, int | None] | None:
    """(source, file, line) of ``cls.train`` when it is a Python override that changes state."""
    import torch.nn as nn

    train = getattr(cls, "train", None)
    if train is None or train is nn.Module.train or not inspect.isfunction(train):
        return None
    try:
        lines, start = inspect.getsourcelines(train)
        path = inspect.getsourcefile(train)
    except (OSError, TypeError):
        return None
    source = textwrap.dedent("".join(lines))
    if not any(word in source for word in _STATE_WORDS):
        return None
    return source, path, start


def _setup_calls(source: str) -> set[str]:
    """Names of the ``self.<method>()`` calls an override makes (``_freeze_stages``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {node.func.attr for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"}


def _init_does_setup(cls: type, calls: set[str]) -> bool:
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or not inspect.isfunction(init):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(init))
        except (OSError, TypeError):
            continue
        if calls & _setup_calls(source):
            return True
    return False


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
        held = {id(p) for g in optimizer.param_groups for p in g["params"]}
        for root in self.session.names.root_modules():
            if any(id(p) in held for p in root.parameters()):
                self._check_root(root)

    def _check_root(self, root: Any) -> None:
        ran = self._ran
        reached: set[int] = set()
        for module in root.modules():
            if id(module) in reached or module in ran:
                reached.update(id(m) for m in module.modules())  # a parent's train() reached every child
                continue
            info = self._class_info(type(module))
            if info is None:
                continue
            _, path, line = info
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

    def _class_info(self, cls: type) -> Any:
        if cls not in self._classes:
            info = _override_source(cls)
            if info is not None and _init_does_setup(cls, _setup_calls(info[0]) - {"train", "eval"}):
                info = None
            self._classes[cls] = info
        return self._classes[cls]
