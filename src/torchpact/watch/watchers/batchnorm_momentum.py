"""BatchNorm momentum above 0.5: TensorFlow's convention (``momentum=0.99``) written in torch.

torch updates running statistics as ``(1 - momentum) * running + momentum * batch``; TensorFlow/Keras
as ``momentum * running + (1 - momentum) * batch``. Keras's 0.99 is torch's 0.01. Observed on sampled
steps, where it is used: a normalisation module (``_NormBase``: BatchNorm*, LazyBatchNorm*, SyncBatchNorm,
InstanceNorm with ``track_running_stats``) running in train mode with running statistics, whose
``momentum`` attribute is read at the call (so a value set after construction counts), and a direct
``F.batch_norm(..., training=True, momentum=m)`` call outside such a module. A call is reported at the
optimizer step that follows it, with grad mode on: a statistics-only pass with momentum 1.0 under
``no_grad`` and no step (fvcore's precise BN) is not training.
"""

from __future__ import annotations

from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.frames import user_frame
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers._patch import Patch, remove_all

WARN_AT = 0.9   # the last batch weighs at least 90% of the running statistics
ABOVE = 0.5     # above this the last two batches weigh more than 75%

BATCHNORM_MOMENTUM = Check(
    code="TP465",
    category=Category.TRAINING,
    severity=Severity.WARNING,
    severity_note="`info` for a momentum in (0.5, 0.9): the running statistics follow the last two or three "
                  "batches, which is rarely meant but can be",
    summary="BatchNorm momentum above 0.5: its running statistics are those of the last batch (TensorFlow's "
            "convention is 1 - torch's).",
    doc="""## What it does
At runtime, on sampled steps, reads the `momentum` of every normalisation layer that updates running
statistics in a training forward (`nn.BatchNorm1d/2d/3d`, `LazyBatchNorm*`, `SyncBatchNorm`,
`InstanceNorm*` with `track_running_stats=True`), and the `momentum` passed to a direct
`F.batch_norm(..., training=True, momentum=...)`. It reports a momentum above 0.5 used in a forward that
an optimizer step follows: a warning from 0.9, info between 0.5 and 0.9. The attribute is read when
the layer runs, so a value set after construction (`m.momentum = 0.99` in an `apply(fn)`) counts.

## Why is this bad?
torch 2.13 updates the running statistics as `running = (1 - momentum) * running + momentum * batch`
(default `momentum=0.1`: an average over about the last 10 batches). TensorFlow and Keras use the
opposite convention, `running = momentum * running + (1 - momentum) * batch`, with a default of 0.99.
Ported as is, `momentum=0.99` makes the running statistics 99% those of the last training batch:
`model.eval()` then normalises every input with one batch's noisy estimate — a tiny last batch of an
epoch, or a batch of one class, and evaluation accuracy collapses while training accuracy looks fine
(pytorch/vision#8250). Nothing warns.

## How to fix
Use torch's convention: `momentum = 1 - keras_momentum` (Keras's 0.99 is `momentum=0.01`), or keep
the default 0.1. `momentum=None` gives a cumulative average over all batches.""",
)


class BatchNormMomentum(Watcher):
    """TP465: a normalisation layer trained with momentum above 0.5."""

    name = "batchnorm_momentum"
    checks = (BATCHNORM_MOMENTUM,)
    unsampled_calls = "none"
    sampled_only = frozenset({"on_step_pre", "on_step_end"})

    def __init__(self) -> None:
        super().__init__()
        self._norm_classes: dict[type, bool] = {}
        self._norm_base: Any = None
        self._pending: dict[Any, tuple] = {}   # key -> (module or None, momentum, path, line, label)
        self._done: set[Any] = set()           # keys reported
        self._patches: list[Patch] = []

    def attach(self, session: Any) -> None:
        super().attach(session)
        import torch.nn.functional as F
        from torch.nn.modules.batchnorm import _NormBase

        self._norm_base = _NormBase
        self._patches.append(Patch(F, "batch_norm", self._wrap))

    def on_close(self) -> None:
        remove_all(self._patches)
        self._pending.clear()

    def _is_norm(self, module: Any) -> bool:
        cls = type(module)
        known = self._norm_classes.get(cls)
        if known is None:
            known = self._norm_classes[cls] = isinstance(module, self._norm_base)
        return known

    # ------------------------------------------------------------------ observation
    def on_forward_pre(self, module: Any, args: tuple) -> None:
        if not self._is_norm(module) or not module.training or id(module) in self._pending or id(module) in self._done:
            return
        momentum = module.momentum
        if momentum is None or getattr(module, "running_mean", None) is None or not _above(momentum):
            return
        import torch

        if not torch.is_grad_enabled():
            return
        self._pending[id(module)] = (module, float(momentum), None, None, type(module).__name__)

    def _wrap(self, original: Any) -> Any:
        def batch_norm(input: Any, running_mean: Any, running_var: Any, *args: Any, **kwargs: Any) -> Any:
            session = self.session
            if session.sampled and not session.closed and running_mean is not None:
                training = args[2] if len(args) > 2 else kwargs.get("training", False)
                momentum = args[3] if len(args) > 3 else kwargs.get("momentum", 0.1)
                if training and momentum is not None and _above(momentum):
                    self._functional(float(momentum), user_frame(1))
            return original(input, running_mean, running_var, *args, **kwargs)
        return batch_norm

    def _functional(self, momentum: float, frame: Any) -> None:
        import torch

        module = self.session.innermost_module()
        if module is not None and self._is_norm(module):
            return  # torch's own layer passing its momentum: seen as the module
        if not torch.is_grad_enabled():
            return
        path, line = (frame.f_code.co_filename, frame.f_lineno) if frame is not None else (None, None)
        key = ("F", path, line)
        if key not in self._pending and key not in self._done:
            self._pending[key] = (module, momentum, path, line, "F.batch_norm")

    # ------------------------------------------------------------------ confirmation at the step
    def on_step_pre(self, optimizer: Any) -> None:
        pending, self._pending = self._pending, {}
        for key, (module, momentum, path, line, label) in pending.items():
            if label != "F.batch_norm":
                now = module.momentum
                if now is None or not _above(now):
                    continue  # restored before the step: that pass was not training with it
            self._done.add(key)
            self._report(module, momentum, path, line, label)

    def on_step_end(self, step: int) -> None:
        self._pending.clear()

    def _report(self, module: Any, momentum: float, path: str | None, line: int | None, label: str) -> None:
        names = self.session.names
        if label == "F.batch_norm":
            where = f"`{names.module(module)}` calls F.batch_norm" if module is not None else "F.batch_norm is called"
            subject = names.module(module) if module is not None else "F.batch_norm"
            what = f"{where} with training=True and momentum={momentum:g}"
            dedup = ("F", path, line)
        else:
            subject = names.module(module)
            what = f"`{subject}` ({label}) is trained with momentum={momentum:g}"
            dedup = ("module", id(module))
        share = momentum * 100
        severity = Severity.WARNING if momentum >= WARN_AT else Severity.INFO
        self.session.report(
            BATCHNORM_MOMENTUM,
            f"{what}: torch updates running statistics as (1 - momentum) * running + momentum * batch, so they are "
            f"{share:.3g}% those of the last training batch and eval mode normalises with one batch's estimate "
            f"(TensorFlow/Keras's momentum={momentum:g} is torch's momentum={1 - momentum:.3g})",
            subject=subject, path=path, line=line, severity=severity, key=dedup, momentum=momentum,
            fix=f"use torch's convention: momentum={1 - momentum:.3g} (1 - the Keras value), or the default 0.1; "
                "momentum=None for a cumulative average")


def _above(momentum: Any) -> bool:
    try:
        return float(momentum) > ABOVE
    except (TypeError, ValueError):
        return False
