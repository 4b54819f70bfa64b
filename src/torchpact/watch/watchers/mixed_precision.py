"""float16 training: gradients that overflow or underflow without loss scaling (TP304), and a GradScaler
whose scale keeps collapsing (TP356).

Which parameters are trained in float16: those of modules whose own output is float16 on sampled
steps (under ``torch.autocast(dtype=torch.float16)`` that is Linear/Conv/matmul-like modules: their
weight gradient is a float16 matmul), and float16 parameters (``model.half()``). bfloat16 has
float32's exponent range and is never flagged.

Whether a GradScaler is in use. ``GradScaler.step(optimizer)`` calls ``optimizer.step()`` from its own
frame, so the optimizer's step pre-hook finds the scaler by walking a few frames up (a file-name
filter first, then ``isinstance``); a disabled scaler (``GradScaler(enabled=False)``) does not count.
A scaler that skips every step never calls ``optimizer.step()``, so it is also looked for, until
found, in the locals of the user's frame that calls the model (and one level into ``self``), on
sampled calls. Its scale tensor is updated in place once per ``update()``: its version counter says
when to copy it (once per iteration), and on CUDA the copy goes to pinned memory without a sync and
is read when its event has completed.

Cost: nothing per module beyond a dtype test on sampled steps; in the step pre-hook, only when
float16 is used without a scaler, one ``count_nonzero`` per float16-trained parameter and one
``_foreach_norm``, read back together.
"""

from __future__ import annotations

import math
import os
import sys
import weakref
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.frames import user_frame
from torchpact.watch.watcher import Check, Watcher

UNDERFLOW_FRACTION = 0.5   # exactly-zero share of float16-computed gradients
UNDERFLOW_STEPS = 3        # consecutive checked steps
COLLAPSE_SKIPS = 8         # skipped steps after the first taken one ...
COLLAPSE_SHARE = 0.5       # ... that are at least this share of the iterations since
SCAN_ATTEMPTS = 50         # frames searched for a scaler that never steps

FP16_WITHOUT_SCALER = Check(
    code="TP304",
    category=Category.NUMERICS,
    severity=Severity.WARNING,
    summary="float16 gradients overflow to inf/NaN or underflow to zero, and no GradScaler scales the loss.",
    doc="""## What it does
Notices float16 training (modules whose output is float16 under `torch.autocast`, or float16
parameters) and whether a `torch.amp.GradScaler` is used (found from `scaler.step(optimizer)`;
`GradScaler(enabled=False)` does not count). Without an enabled scaler, it reads on sampled steps the
gradients of the float16-trained parameters about to be applied, and reports when they hold inf/NaN
(float16 overflow), or when at least half of their elements are exactly zero on three consecutive
checked steps (underflow). Training in float16 without symptoms is not reported at runtime (the lint
rule flags the pattern).

## Why is this bad?
float16 ends at 65504 and its smallest subnormal is 6e-08: in the backward pass every activation
gradient below about 3e-08 rounds to exactly 0, and every one above 65504 becomes inf. Without loss
scaling, small gradients are silently lost (the layer stops learning), and an overflow is applied as
inf/NaN to the weights. `GradScaler` multiplies the loss so that gradients land in float16's range,
unscales them before the step, and skips the steps that overflow.

## How to fix
`scaler = torch.amp.GradScaler("cuda")`, then `scaler.scale(loss).backward()`, `scaler.step(optimizer)`,
`scaler.update()`; or autocast to `torch.bfloat16` where the hardware has it. For a `.half()` model,
keep float32 parameters and run the forward under autocast instead (GradScaler refuses float16
parameters).""",
)

SCALE_COLLAPSE = Check(
    code="TP356",
    category=Category.NUMERICS,
    severity=Severity.WARNING,
    summary=("A GradScaler's scale keeps halving: the model produces inf/NaN gradients at most steps, which are "
             "skipped."),
    doc="""## What it does
Follows the scale of the `torch.amp.GradScaler` in use, once per `update()`. Each halving is a skipped
optimizer step (inf/NaN gradients). The first halvings are the scaler calibrating its initial scale
(65536 by default) and are expected; the check reports when, after the first step taken, at least
8 steps were skipped and they are at least half of the iterations since, or when the scale falls
below 1 (the loss is then scaled down: even unscaled gradients overflow).

## Why is this bad?
A skipped step is a step the model does not learn from, and torch 2.13 says nothing: training
"runs", the loss stays flat, and `scaler.get_scale()` quietly heads to 0. Loss scaling can only fix
gradients that are too small; when the forward or the backward produces inf/NaN at any scale
(a float16 overflow in the forward, log/sqrt of 0, a division by 0), the scaler just keeps halving.

## How to fix
Find where the inf/NaN comes from (the `nonfinite` watcher's TP351/TP352 name the module and op):
run the overflowing op in float32 (`with torch.autocast(..., enabled=False)` and `.float()` inputs),
use bfloat16, clamp log/sqrt arguments, add eps to denominators, or lower the learning rate.""",
)

_SCALER_FILE = os.path.join("torch", "amp", "grad_scaler.py")
def _is_scaler(obj: Any) -> bool:
    import torch

    return isinstance(obj, torch.amp.GradScaler)


def _scaler_stepping() -> Any:
    """The GradScaler whose ``step()`` is calling ``optimizer.step()`` right now, or None."""
    frame = sys._getframe(2)
    for _ in range(12):
        if frame is None:
            return None
        if frame.f_code.co_filename.endswith(_SCALER_FILE):
            candidate = frame.f_locals.get("self")
            if _is_scaler(candidate):
                return candidate
        frame = frame.f_back
    return None


def _scaler_in_user_frame() -> Any:
    """A GradScaler held by the user's innermost frame: a local, a global, or an attribute of ``self``."""
    frame = user_frame(1)
    if frame is None:
        return None
    values = list(frame.f_locals.values())
    owner = frame.f_locals.get("self")
    if owner is not None and hasattr(owner, "__dict__"):
        values.extend(vars(owner).values())
    if frame.f_globals is not frame.f_locals:
        values.extend(frame.f_globals.values())
    for value in values:
        if _is_scaler(value):
            return value
    return None


class _Reading:
    """The scale after an ``update()``: copied to the host without a sync on CUDA, read when it has landed."""

    def __init__(self, scale: Any, updates: int, backoff: float) -> None:
        import torch

        self.updates = updates
        self.backoff = backoff
        self.event = None
        if scale.device.type == "cuda":
            self.host = torch.empty((), dtype=scale.dtype, pin_memory=True)
            self.host.copy_(scale.detach().reshape(()), non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record(torch.cuda.current_stream(scale.device))
        else:
            self.host = scale.detach().reshape(()).clone()

    def ready(self) -> bool:
        return self.event is None or bool(self.event.query())

    def value(self) -> float:
        if self.event is not None:
            self.event.synchronize()  # at the end of the run only; otherwise read once ready()
        return float(self.host.item())


def _fmt(x: float) -> str:
    return f"{x:.3g}"


class MixedPrecision(Watcher):
    """TP304: float16 gradients overflow/underflow without a GradScaler; TP356: a GradScaler's scale collapses."""

    name = "mixed_precision"
    unsampled_calls = "none"   # "roots" once a GradScaler is adopted: its scale is read at every model call
    checks = (FP16_WITHOUT_SCALER, SCALE_COLLAPSE)

    def __init__(self) -> None:
        super().__init__()
        self._fp16_modules: dict[int, weakref.ref] = {}
        self._fp16_params: dict[int, tuple[weakref.ref, weakref.ref]] = {}  # param -> (param, module)
        self._scaler: weakref.ref | None = None
        self._disabled_scaler = False  # a GradScaler(enabled=False) steps the optimizer
        self._scan_attempts = 0
        self._underflow_streak = 0
        self._underflow_first: int | None = None
        # the scale, observed once per update()
        self._scale_version = -1
        self._readings: list[_Reading] = []
        self._last_scale: float | None = None
        self._init_scale: float | None = None
        self._updates = 0
        self._skips = 0
        self._post_updates = 0        # after the first step the scaler let through
        self._post_skips = 0
        self._stepped = False         # an update that did not halve the scale was seen
        self._min_scale = math.inf
        self._collapse_reported = False

    # ------------------------------------------------------------------ forward
    def on_forward_pre(self, module: Any, args: tuple) -> None:
        if self.session.depth != 1:
            return
        if self._scaler is not None:
            self._observe_scale()
        elif self._fp16_modules and self.session.sampled and self._scan_attempts < SCAN_ATTEMPTS:
            self._scan_attempts += 1
            scaler = _scaler_in_user_frame()
            if scaler is not None:
                self._adopt(scaler)

    def on_forward(self, module: Any, args: tuple, output: Any) -> None:
        if not self.session.sampled or not module._parameters or id(module) in self._fp16_modules:
            return
        import torch

        if isinstance(output, torch.Tensor) and output.dtype == torch.float16 and output.requires_grad:
            self._fp16_modules[id(module)] = weakref.ref(module)
            for p in module._parameters.values():
                if p is not None and p.requires_grad:
                    self._fp16_params[id(p)] = (weakref.ref(p), weakref.ref(module))

    # ------------------------------------------------------------------ step
    def on_step_pre(self, optimizer: Any) -> None:
        scaler = _scaler_stepping() if self._fp16_modules or self._scaler is not None else None
        if scaler is not None and (self._scaler is None or self._scaler() is not scaler):
            self._adopt(scaler)
        if scaler is not None and scaler.is_enabled():
            self._observe_scale()
            return
        if scaler is not None:
            self._disabled_scaler = True
        if not self.session.sampled or not self._fp16_modules:
            return
        if getattr(optimizer, "found_inf", None) is not None:
            return  # stepped by a GradScaler-aware optimizer on behalf of a scaler
        self._check_unscaled(optimizer)

    def on_close(self) -> None:
        if self._scaler is not None:
            self._observe_scale()
        for reading in self._readings:  # the last copies: waiting for them costs nothing now
            self._account(reading.value(), reading.updates, reading.backoff)
        self._readings.clear()

    # ------------------------------------------------------------------ TP304
    def _check_unscaled(self, optimizer: Any) -> None:
        import torch

        params = []
        for group in optimizer.param_groups:
            for p in group["params"]:
                g = p.grad
                if g is None or g.is_sparse or not g.numel():
                    continue
                entry = self._fp16_params.get(id(p))
                half = p.dtype == torch.float16
                if (entry is not None and entry[0]() is p) or half:
                    module = entry[1]() if entry is not None else None
                    if module is not None and type(module).__name__ in ("Embedding", "EmbeddingBag"):
                        continue  # rows of unused tokens are zero by construction
                    params.append(p)
        if not params:
            return
        grads = [p.grad for p in params]
        with torch.no_grad():
            nonzero = torch.stack([torch.count_nonzero(g) for g in grads]).float()
            norms = torch.stack(list(torch._foreach_norm(grads, 2, dtype=torch.float32)))
            values = torch.cat([nonzero.to(norms.device), norms]).tolist()
        counts, norm_values = values[:len(grads)], values[len(grads):]
        names = self.session.names
        bad = [names.param(p) for p, n in zip(params, norm_values, strict=True) if not math.isfinite(n)]
        if bad:
            bad = [names.param(p) for p in params if not bool(torch.isfinite(p.grad).all())]
        step = self.session.step
        pure = any(p.dtype == torch.float16 for p in params)
        no_scaler = ("the GradScaler is disabled (`enabled=False`)" if self._disabled_scaler
                     else "no GradScaler is in use")
        if bad:
            self._report_fp16(
                f"float16 gradients overflowed at step {step}: {self._listing(bad)} hold inf/NaN, and {no_scaler}, "
                "so the update applies them", pure, kind="overflow", params=bad)
            return
        total = sum(p.numel() for p in params)
        zeros = total - sum(counts)
        fraction = zeros / total
        if fraction < UNDERFLOW_FRACTION:
            self._underflow_streak = 0
            return
        self._underflow_streak += 1
        if self._underflow_first is None or self._underflow_streak == 1:
            self._underflow_first = step
        if self._underflow_streak < UNDERFLOW_STEPS:
            return
        worst = sorted((c / p.numel(), -p.numel(), names.param(p)) for p, c in zip(params, counts, strict=True))[:3]
        listed = ", ".join(f"`{n}` ({(1 - f) * 100:.0f}% zeros)" for f, _, n in worst)
        self._report_fp16(
            f"{fraction * 100:.0f}% of the float16-computed gradients are exactly zero on {self._underflow_streak} "
            f"checked steps in a row ({listed}), and {no_scaler}: gradients below float16's range "
            "(about 3e-08) flush to zero in the backward pass", pure, kind="underflow", fraction=fraction,
            first_step=self._underflow_first)

    def _report_fp16(self, message: str, pure: bool, **extra: Any) -> None:
        path, line = self._call_site()
        fix = ("scale the loss with `torch.amp.GradScaler` (`scaler.scale(loss).backward()`, `scaler.step(optimizer)`, "
               "`scaler.update()`), or autocast to `torch.bfloat16`")
        if pure:
            fix = ("keep float32 parameters and run the forward under `torch.autocast(..., dtype=torch.float16)` "
                   "with a `torch.amp.GradScaler` (GradScaler refuses float16 parameters), or use bfloat16")
        self.session.report(FP16_WITHOUT_SCALER, message, subject="float16 training", fix=fix, path=path, line=line,
                            key="fp16-without-scaler", **extra)

    @staticmethod
    def _listing(names: list[str]) -> str:
        return ", ".join(f"`{n}`" for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")

    def _call_site(self) -> tuple[str | None, int | None]:
        for root in self.session.names.root_modules():
            site = self.session.root_call_sites.get(id(root))
            if site and site[0]:
                return site
        return None, None

    # ------------------------------------------------------------------ TP356
    def _adopt(self, scaler: Any) -> None:
        self._scaler = weakref.ref(scaler)
        self.unsampled_calls = "roots"
        self._scale_version = -1
        self._readings.clear()
        self._last_scale = None

    def _observe_scale(self) -> None:
        """Queue a copy of the scale when an ``update()`` changed it; account for the copies that have landed."""
        scaler = self._scaler() if self._scaler is not None else None
        if scaler is None or not scaler.is_enabled():
            return
        scale_t = getattr(scaler, "_scale", None)
        if scale_t is not None and scale_t._version != self._scale_version and len(self._readings) < 256:
            updates = scale_t._version - self._scale_version if self._scale_version >= 0 else scale_t._version
            self._scale_version = scale_t._version
            if self._init_scale is None:
                self._init_scale = float(getattr(scaler, "_init_scale", 65536.0))
            self._readings.append(_Reading(scale_t, updates, scaler.get_backoff_factor()))
        while self._readings and self._readings[0].ready():
            reading = self._readings.pop(0)
            self._account(reading.value(), reading.updates, reading.backoff)

    def _account(self, scale: float, updates: int, backoff: float) -> None:
        previous = self._last_scale if self._last_scale is not None else self._init_scale or scale
        self._last_scale = scale
        self._min_scale = min(self._min_scale, scale)
        halvings = 0
        if 0 < scale < previous and 0 < backoff < 1:
            halvings = max(1, round(math.log(previous / scale) / math.log(1 / backoff)))
        elif scale == 0 < previous:
            halvings = updates
        halvings = min(halvings, max(updates, 1))
        self._updates += updates
        self._skips += halvings
        if self._stepped:
            self._post_updates += updates
            self._post_skips += halvings
        if updates > halvings:
            self._stepped = True  # an update that did not halve: a step was taken
        self._check_collapse(scale)

    def _check_collapse(self, scale: float) -> None:
        if self._collapse_reported:
            return
        collapsing = (self._post_skips >= COLLAPSE_SKIPS and self._post_skips >= COLLAPSE_SHARE * self._post_updates)
        below_one = scale < 1.0 and self._skips >= COLLAPSE_SKIPS and (self._init_scale or 0) >= 1.0
        if not (collapsing or below_one):
            return
        self._collapse_reported = True
        start = self._init_scale if self._init_scale is not None else scale
        if collapsing:
            detail = (f"{self._post_skips} of the {self._post_updates} iterations since its first taken step were "
                      "skipped")
        elif not self._stepped:
            detail = f"all {self._updates} iterations were skipped, no optimizer step was taken"
        else:
            detail = f"{self._skips} of {self._updates} iterations were skipped"
        message = (f"the GradScaler's scale fell from {_fmt(start)} to {_fmt(scale)}: {detail} because the "
                   "gradients held inf/NaN")
        if scale < 1.0:
            message += "; a scale below 1 means even the unscaled gradients overflow, which loss scaling cannot fix"
        path, line = self._call_site()
        self.session.report(
            SCALE_COLLAPSE, message, subject="GradScaler", path=path, line=line, key="scale-collapse",
            fix="find where inf/NaN arises (the nonfinite watcher's TP351/TP352 name the module and op) and run that "
                "op in float32 or bfloat16, clamp log/sqrt arguments, add eps to denominators, or lower the "
                "learning rate",
            scale=scale, skipped=self._skips, iterations=self._updates)
