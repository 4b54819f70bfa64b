"""A hand-written BatchNorm that never uses batch statistics: ``F.batch_norm`` without ``training=``.

``F.batch_norm``'s ``training`` argument defaults to False on torch 2.13, the reverse of
``F.dropout``'s. A module that implements its own normalisation with
``F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias)`` normalises with its
running statistics even in train mode and never updates them: they stay at their initial 0 / 1.
``F.batch_norm`` is wrapped (O(1) per call); a call that leaves ``training`` at its default, made
inside a module in train mode whose own buffers are the running statistics, is reported with its
line. Passing ``training`` explicitly (``False`` for a frozen BatchNorm on purpose) is silent, and
so is ``nn.BatchNorm*``, which always passes it.
"""

from __future__ import annotations

import os
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers._patch import Patch, caller_frame, remove_all

BATCH_NORM_DEFAULT = Check(
    code="TP464",
    category=Category.TRAINING,
    severity=Severity.WARNING,
    summary="A module in train mode calls F.batch_norm without training=: its running statistics never update.",
    doc="""## What it does
At runtime, looks at `F.batch_norm` calls that leave `training=` at its default, made inside a
module in train mode that passes its own buffers as the running statistics. It reports the module
and the line of the call.

## Why is this bad?
`F.batch_norm(input, running_mean, running_var, ...)` defaults to `training=False` in torch 2.13:
it normalises with the running statistics and does not update them. In a custom normalisation
layer this means training normalises with the initial statistics (mean 0, variance 1) forever —
activations are not normalised at all — and `model.eval()` later changes nothing either.

## How to fix
Pass the mode: `F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
training=self.training, momentum=self.momentum, eps=self.eps)` — or use `nn.BatchNorm*d`. To freeze
the statistics on purpose, pass `training=False` explicitly.""",
)


class FunctionalBatchNorm(Watcher):
    """TP464: ``F.batch_norm`` left in inference mode inside a training module."""

    name = "functional_batch_norm"
    checks = (BATCH_NORM_DEFAULT,)

    def __init__(self) -> None:
        super().__init__()
        self._patches: list[Patch] = []

    def attach(self, session: Any) -> None:
        super().attach(session)
        import torch.nn.functional as F

        self._patches.append(Patch(F, "batch_norm", self._wrap))

    def on_close(self) -> None:
        remove_all(self._patches)

    def _wrap(self, original: Any) -> Any:
        def batch_norm(input: Any, running_mean: Any, running_var: Any, *args: Any, **kwargs: Any) -> Any:
            session = self.session
            if len(args) < 3 and "training" not in kwargs and not session.closed:
                module = session.innermost_module()
                if module is not None and module.training and running_mean is not None and any(
                        b is running_mean for b in module._buffers.values()):
                    self._report(module, caller_frame())
            return original(input, running_mean, running_var, *args, **kwargs)
        return batch_norm

    def _report(self, module: Any, frame: Any) -> None:
        path, line = (frame.f_code.co_filename, frame.f_lineno) if frame is not None else (None, None)
        name = self.session.names.module(module)
        where = f" at {os.path.basename(path)}:{line}" if path else ""
        self.session.report(
            BATCH_NORM_DEFAULT,
            f"`{name}` ({type(module).__name__}) is in train mode but calls F.batch_norm{where} without training=, "
            "which defaults to False: it normalises with its running statistics and never updates them",
            subject=name, path=path, line=line, key=(type(module).__name__, path, line),
            fix="pass training=self.training (and momentum / eps), or use nn.BatchNorm*d")
