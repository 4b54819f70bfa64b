"""Dropout that stays on in eval mode because a functional call ignores ``self.training``.

``nn.Dropout`` passes ``self.training`` to ``F.dropout``; a module that calls ``F.dropout(x, p)``
itself, leaving ``training=`` at its default (True), or ``F.scaled_dot_product_attention(...,
dropout_p=self.dropout)`` without zeroing ``dropout_p`` outside training (transformers#33844, the
FlashAttention-2 attention of M2M100/Bart), drops activations during evaluation too. Every dropout
entry point is wrapped once (``_dropout_calls``); a call that drops units made inside a module whose
``training`` is False is reported with the line of the call: as a warning when the mode was left to
the function (a defaulted ``training=``, SDPA's ``dropout_p``), as info when the caller passed a true
mode itself (``F.dropout(x, p, True)``), which real code does on purpose (Monte-Carlo dropout, a
resampled dropout that must stay on under ``eval()``). Calls from torch's own dropout modules and from
``F.multi_head_attention_forward`` (which zeroes ``dropout_p`` outside training) follow the module's
mode and skip the look for the innermost module (on an unsampled step that look walks the frames,
about 35 us a call: 4 of them were 0.15% of a small GPT's step).
"""

from __future__ import annotations

import os
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers import _dropout_calls

DROPOUT_IN_EVAL = Check(
    code="TP458",
    category=Category.TRAINING,
    severity=Severity.WARNING,
    severity_note="`info` when the caller passed a true mode itself (`F.dropout(x, p, True)`, "
                  "`torch.dropout(x, p, train=True)`): real code does that on purpose (Monte-Carlo dropout)",
    summary="A module in eval mode still applies dropout: a functional call ignores self.training.",
    doc="""## What it does
At runtime, looks at every dropout call that drops units — `F.dropout`, `F.dropout1d/2d/3d`,
`F.alpha_dropout`, `F.feature_alpha_dropout`, `torch.dropout` and its feature/alpha forms with p > 0 and a
true mode, and `F.scaled_dot_product_attention` with `dropout_p > 0` — made inside a module whose
`training` is False (after `model.eval()`). It reports the module and the line of the call: a warning
when the mode was left to the function (`training=` left out, or SDPA's `dropout_p`), info when the
caller passed a true mode itself.

## Why is this bad?
In torch 2.13 `F.dropout` and its 1d/2d/3d forms default to `training=True` (`F.alpha_dropout` and
`F.feature_alpha_dropout` default to False, so they never drop without it), `torch.dropout` takes its
`train` argument as given, and `scaled_dot_product_attention` applies `dropout_p` whatever the mode:
`model.eval()` reaches none of them. Evaluation and inference stay random — the same input gives
different outputs, and metrics are those of a model with dropout on (transformers#33844: the
FlashAttention-2 attention of M2M100/Bart kept dropping attention weights in eval mode). `nn.Dropout`
passes its own `self.training`, so switching a Dropout layer back to train mode after `model.eval()`
(Monte-Carlo dropout) is not reported.

## How to fix
Pass the mode: `F.dropout(x, p, training=self.training)`, and
`dropout_p=self.dropout if self.training else 0.0` for `scaled_dot_product_attention` — or use an
`nn.Dropout` submodule, which follows `model.eval()`. Dropout kept on in evaluation on purpose
(Monte-Carlo dropout) is reported as info only.""",
)

class FunctionalDropout(Watcher):
    """TP458: functional dropout that stays active in eval mode."""

    name = "functional_dropout"
    checks = (DROPOUT_IN_EVAL,)

    def __init__(self) -> None:
        super().__init__()
        self._follows_mode: frozenset[Any] = frozenset()  # code objects of torch callers that pass the mode
        self._listening = False
        self._module_class: Any = None

    def attach(self, session: Any) -> None:
        super().attach(session)
        import torch.nn as nn
        import torch.nn.functional as F

        codes = [getattr(F.multi_head_attention_forward, "__code__", None)]
        for cls in (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout):
            codes.append(getattr(cls.forward, "__code__", None))
        self._follows_mode = frozenset(c for c in codes if c is not None)
        self._module_class = nn.Module
        _dropout_calls.subscribe(self._heard)
        self._listening = True

    def on_close(self) -> None:
        if self._listening:
            self._listening = False
            _dropout_calls.unsubscribe(self._heard)

    def _heard(self, function: str, p: float, mode_given: bool, frame: Any) -> None:
        session = self.session
        if session.closed or frame is None or frame.f_code in self._follows_mode:
            return
        owner = frame.f_locals.get("self")  # the module whose forward (or helper method) makes the call
        module = owner if isinstance(owner, self._module_class) else session.innermost_module()
        if module is None or module.training:
            return
        self._report(module, function, p, mode_given, frame)

    def _report(self, module: Any, function: str, p: float, mode_given: bool, frame: Any) -> None:
        path, line = frame.f_code.co_filename, frame.f_lineno
        name = self.session.names.module(module)
        where = f" at {os.path.basename(path)}:{line}"
        if function == "F.scaled_dot_product_attention":
            call = f"{function}(dropout_p={p:g})"
        elif mode_given:
            call = f"{function}(p={p:g}, {'train' if function.startswith('torch.') else 'training'}=True)"
        else:
            call = f"{function}(p={p:g}) without training="
        consequence = ("dropout stays on during evaluation, so outputs are random and metrics are those of a "
                       "model with dropout")
        if mode_given:
            self.session.report(
                DROPOUT_IN_EVAL,
                f"`{name}` ({type(module).__name__}) is in eval mode but calls {call}{where}: {consequence} "
                "(Monte-Carlo dropout on purpose?)",
                subject=name, path=path, line=line, key=(type(module).__name__, path, line), severity=Severity.INFO,
                fix="pass the module's mode (training=self.training) unless this is Monte-Carlo dropout on purpose")
            return
        self.session.report(
            DROPOUT_IN_EVAL,
            f"`{name}` ({type(module).__name__}) is in eval mode but calls {call}{where}: {consequence}",
            subject=name, path=path, line=line, key=(type(module).__name__, path, line),
            fix="pass the mode: F.dropout(x, p, training=self.training) / "
                "dropout_p=self.dropout if self.training else 0.0")
