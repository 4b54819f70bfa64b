"""Calls of torch's losses on sampled steps, for watchers that compare a loss's target with what the model
was fed (``rnn_layout``, ``causal_leak``).

The (input, target) losses of ``torch.nn.functional`` are wrapped for the run (``Patch``; a call costs one
attribute test on steps that are not sampled); loss modules (``nn.modules.loss._Loss``) are handed over by
the watcher's ``on_forward_pre``. A loss module calling its own function is seen once, as the module.
A forked DataLoader worker inherits the wrappers: they only pass through there.
"""

from __future__ import annotations

import os
from typing import Any, Callable, NamedTuple

from torchpact.watch.frames import user_location
from torchpact.watch.watchers._patch import Patch, remove_all

FUNCTIONS = ("cross_entropy", "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", "mse_loss",
             "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div", "poisson_nll_loss", "multi_margin_loss",
             "multilabel_soft_margin_loss", "soft_margin_loss")
_IGNORE_INDEX_AT = {"cross_entropy": 4, "nll_loss": 4}   # its position among the function's arguments


class LossCall(NamedTuple):
    """One loss call: what it was given."""

    label: str            # "CrossEntropyLoss", "F.cross_entropy"
    input: Any
    target: Any
    ignore_index: int | None
    path: str | None
    line: int | None


class LossCalls:
    """Hands each loss call of a sampled step to ``listener``."""

    def __init__(self, watcher: Any, listener: Callable[[LossCall], None],
                 functions: tuple[str, ...] = FUNCTIONS) -> None:
        self.session = watcher.session
        self.watcher = watcher
        self.listener = listener
        self.functions = functions
        self._patches: list[Patch] = []
        self._pid = os.getpid()
        self._calling = False
        self._broken = False
        self._loss_classes: dict[type, bool] = {}
        self._loss_base: Any = None

    def install(self) -> None:
        import torch.nn.functional as F
        from torch.nn.modules.loss import _Loss

        self._loss_base = _Loss
        for name in self.functions:
            if hasattr(F, name):
                self._patches.append(Patch(F, name, self._wrap(name), sampled_only=True))

    def remove(self) -> None:
        remove_all(self._patches)

    def is_loss_module(self, module: Any) -> bool:
        cls = type(module)
        known = self._loss_classes.get(cls)
        if known is None:
            known = self._loss_classes[cls] = self._loss_base is not None and isinstance(module, self._loss_base)
        return known

    def module_call(self, module: Any, args: tuple) -> None:
        """From ``on_forward_pre``: a loss module's call, on a sampled step."""
        if self._broken or len(args) < 2 or not self.is_loss_module(module):
            return
        path, line = user_location(3)
        self.listener(LossCall(type(module).__name__, args[0], args[1], getattr(module, "ignore_index", None),
                               path, line))

    def _wrap(self, name: str) -> Any:
        def make(original: Any) -> Any:
            def loss(*args: Any, **kwargs: Any) -> Any:
                session = self.session
                if self._calling or not session.sampled or session.closed or self._broken \
                        or os.getpid() != self._pid:
                    return original(*args, **kwargs)
                self._calling = True  # a torch function mode calling the wrapper again: the same call
                try:
                    try:
                        self._functional(name, args, kwargs)
                    except Exception as exc:  # never let a watcher bug reach the script through a loss call
                        self._fail(exc)
                    return original(*args, **kwargs)
                finally:
                    self._calling = False
            return loss
        return make

    def _functional(self, name: str, args: tuple, kwargs: dict) -> None:
        import torch

        if torch._C._get_tracing_state() is not None:
            return
        stack = self.session.module_stack()
        if stack and self.is_loss_module(stack[-1]):
            return  # a loss module calling its function: seen as the module
        values = list(args[:2])
        for key in ("input", "target")[len(values):]:
            if key in kwargs:
                values.append(kwargs[key])
        if len(values) < 2:
            return
        ignore = None
        if name in _IGNORE_INDEX_AT:
            at = _IGNORE_INDEX_AT[name]
            ignore = args[at] if len(args) > at else kwargs.get("ignore_index", -100)
        path, line = user_location(3)
        self.listener(LossCall(f"F.{name}", values[0], values[1], ignore, path, line))

    def _fail(self, exc: Exception) -> None:
        self._broken = True
        self.session._failed(self.watcher, "a loss call", exc)  # switched off and reported as any watcher bug
