"""Dropout that stays on in eval mode because a functional call ignores ``self.training``.

``nn.Dropout`` passes ``self.training`` to ``F.dropout``; a module that calls ``F.dropout(x, p)``
itself, leaving ``training=`` at its default (True), or ``F.scaled_dot_product_attention(...,
dropout_p=self.dropout)`` without zeroing ``dropout_p`` outside training (transformers#33844, the
FlashAttention-2 attention of M2M100/Bart), drops activations during evaluation too. The functional
entry points are wrapped (O(1) per call: an argument test and a look at the innermost module); a
call made inside a module whose ``training`` is False with dropout still active is reported with
the line of the call. ``nn.MultiheadAttention`` zeroes its dropout outside training and is silent:
``F.multi_head_attention_forward`` sets ``dropout_p`` to 0 unless ``training``, so its calls with dropout
are training calls and skip the look at the innermost module (on an unsampled step that look walks the
frames, about 35 us a call: 4 of them were 0.15% of a small GPT's step).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers._patch import Patch, remove_all

_DROPOUTS = ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout")

DROPOUT_IN_EVAL = Check(
    code="TP458",
    category=Category.TRAINING,
    severity=Severity.WARNING,
    summary="A module in eval mode still applies dropout: a functional call ignores self.training.",
    doc="""## What it does
At runtime, looks at the functional dropout calls — `F.dropout` (and its 1d/2d/3d/alpha variants)
with `training=` left at its default, and `F.scaled_dot_product_attention` with `dropout_p > 0` —
made inside a module whose `training` is False (after `model.eval()`). It reports the module and the
line of the call.

## Why is this bad?
`F.dropout`'s `training` argument defaults to True in torch 2.13, and
`scaled_dot_product_attention` applies `dropout_p` whatever the mode: `model.eval()` cannot reach
them. Evaluation and inference stay random — the same input gives different outputs, and metrics
are those of a model with dropout on (transformers#33844: the FlashAttention-2 attention of
M2M100/Bart kept dropping attention weights in eval mode).

## How to fix
Pass the mode: `F.dropout(x, p, training=self.training)`, and
`dropout_p=self.dropout if self.training else 0.0` for `scaled_dot_product_attention` — or use an
`nn.Dropout` submodule, which follows `model.eval()`.""",
)


class FunctionalDropout(Watcher):
    """TP458: functional dropout that stays active in eval mode."""

    name = "functional_dropout"
    checks = (DROPOUT_IN_EVAL,)

    def __init__(self) -> None:
        super().__init__()
        self._patches: list[Patch] = []
        self._training_only: Any = None  # the code of F.multi_head_attention_forward (see the module doc)

    def attach(self, session: Any) -> None:
        super().attach(session)
        import torch.nn.functional as F

        self._training_only = getattr(F.multi_head_attention_forward, "__code__", None)
        for name in _DROPOUTS:
            if hasattr(F, name):
                self._patches.append(Patch(F, name, self._wrap_dropout(name)))
        self._patches.append(Patch(F, "scaled_dot_product_attention", self._wrap_sdpa))

    def on_close(self) -> None:
        remove_all(self._patches)

    def _eval_module(self) -> Any:
        session = self.session
        module = None if session.closed else session.innermost_module()
        return None if module is None or module.training else module

    def _wrap_dropout(self, name: str) -> Any:
        def make(original: Any) -> Any:
            def dropout(input: Any, *args: Any, **kwargs: Any) -> Any:
                if len(args) < 2 and "training" not in kwargs:
                    p = args[0] if args else kwargs.get("p", 0.5)
                    if isinstance(p, (int, float)) and p > 0:
                        module = self._eval_module()
                        if module is not None:
                            self._report(module, f"F.{name}(p={p:g}) without training=", sys._getframe(2))
                return original(input, *args, **kwargs)
            return dropout
        return make

    def _wrap_sdpa(self, original: Any) -> Any:
        def scaled_dot_product_attention(*args: Any, **kwargs: Any) -> Any:
            p = args[4] if len(args) > 4 else kwargs.get("dropout_p", 0.0)
            # (frames: this function, Patch's wrapper, the caller)
            if isinstance(p, (int, float)) and p > 0 and sys._getframe(2).f_code is not self._training_only:
                module = self._eval_module()
                if module is not None:
                    self._report(module, f"F.scaled_dot_product_attention(dropout_p={p:g})", sys._getframe(2))
            return original(*args, **kwargs)
        return scaled_dot_product_attention

    def _report(self, module: Any, call: str, frame: Any) -> None:
        path, line = (frame.f_code.co_filename, frame.f_lineno) if frame is not None else (None, None)
        name = self.session.names.module(module)
        where = f" at {os.path.basename(path)}:{line}" if path else ""
        self.session.report(
            DROPOUT_IN_EVAL,
            f"`{name}` ({type(module).__name__}) is in eval mode but calls {call}{where}: dropout stays on "
            "during evaluation, so outputs are random and metrics are those of a model with dropout",
            subject=name, path=path, line=line, key=(type(module).__name__, path, line),
            fix="pass the mode: F.dropout(x, p, training=self.training) / "
                "dropout_p=self.dropout if self.training else 0.0")
