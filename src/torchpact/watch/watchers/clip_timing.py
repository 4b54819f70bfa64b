"""Clipping or unscaling at the wrong moment: on no gradients, or on the previous step's.

``clip_grad_norm_`` / ``clip_grad_value_`` (``torch.nn.utils``) and ``GradScaler.unscale_`` are
wrapped; on sampled steps a call is checked (O(parameters), like the call itself):

- every parameter it was given has ``.grad`` None — called before ``backward()`` or right after
  ``zero_grad()``: it does nothing, and the gradients the step then uses are not clipped;
- the gradients are the very tensors, at the very version, that the last ``optimizer.step()``
  used — called after ``step()`` and before the next ``backward()``: it clips gradients no update
  will read again.

After each sampled ``step()``, up to ``PROBES`` parameters with a gradient are remembered with
their ``.grad``'s identity and version counter (no tensor is read).
"""

from __future__ import annotations

import os
import weakref
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.frames import user_location
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers._patch import Patch, parameter_list, remove_all

PROBES = 4

CLIP_TIMING = Check(
    code="TP461",
    category=Category.TRAINING,
    severity=Severity.WARNING,
    summary="Gradients are clipped or unscaled when there are none, or after optimizer.step() used them.",
    doc="""## What it does
At runtime, checks each call of `torch.nn.utils.clip_grad_norm_` / `clip_grad_value_` and
`GradScaler.unscale_` on sampled steps. It reports the line of the call when none of the
parameters has a gradient (`.grad` is None), or when the gradients are exactly those the last
`optimizer.step()` already used (no `backward()` since).

## Why is this bad?
In torch 2.13 `clip_grad_norm_` skips parameters whose `.grad` is None and returns 0: called before
`loss.backward()` (or after `zero_grad()`), it clips nothing, and `step()` then applies the raw
gradients — exploding gradients are not contained. Called after `optimizer.step()`, it rescales
gradients no update will read again (the next `zero_grad()` discards them). `unscale_` has the same
problem: before `backward()` there is nothing to unscale and `step()` then unscales the new
gradients itself, without the clipping the script meant to do in between.

## How to fix
Order each iteration as `zero_grad()` → `loss.backward()` (`scaler.scale(loss).backward()`) →
`scaler.unscale_(optimizer)` → `clip_grad_norm_(...)` → `optimizer.step()` (`scaler.step(optimizer)`).""",
)


class ClipTiming(Watcher):
    """TP461: clipping / unscaling on missing or already used gradients."""

    name = "clip_timing"
    checks = (CLIP_TIMING,)

    def __init__(self) -> None:
        super().__init__()
        self._patches: list[Patch] = []
        self._used: dict[int, tuple[int, list[tuple[weakref.ref, int, int]]]] = {}   # optimizer -> (step, probes)

    def attach(self, session: Any) -> None:
        super().attach(session)
        import torch.nn.utils as utils
        from torch.amp import grad_scaler

        for name in ("clip_grad_norm_", "clip_grad_value_"):
            self._patches.append(Patch(utils, name, self._wrap_clip(name)))
        self._patches.append(Patch(grad_scaler.GradScaler, "unscale_", self._wrap_unscale))

    def on_close(self) -> None:
        remove_all(self._patches)

    def on_step(self, optimizer: Any) -> None:
        if not self.session.sampled:
            self._used.pop(id(optimizer), None)
            return
        probes = []
        for group in optimizer.param_groups:
            for p in group["params"]:
                g = p.grad
                if g is not None:
                    probes.append((weakref.ref(p), id(g), g._version))
                    if len(probes) >= PROBES:
                        break
            if len(probes) >= PROBES:
                break
        self._used[id(optimizer)] = (self.session.step, probes)

    # ------------------------------------------------------------------ wrappers
    def _wrap_clip(self, name: str) -> Any:
        def make(original: Any) -> Any:
            def clip(parameters: Any, *args: Any, **kwargs: Any) -> Any:
                if not self.session.sampled or self.session.closed:
                    return original(parameters, *args, **kwargs)
                params = parameter_list(parameters)
                self._check(f"torch.nn.utils.{name}", params, user_location(2))
                return original(params, *args, **kwargs)
            return clip
        return make

    def _wrap_unscale(self, original: Any) -> Any:
        def unscale_(scaler: Any, optimizer: Any) -> Any:
            if self.session.sampled and not self.session.closed and scaler.is_enabled():
                params = [p for g in optimizer.param_groups for p in g["params"]]
                self._check("GradScaler.unscale_", params, user_location(2))
            return original(scaler, optimizer)
        return unscale_

    def _check(self, call: str, params: list[Any], site: tuple[str | None, int | None]) -> None:
        trainable = [p for p in params if getattr(p, "requires_grad", False)]
        if not trainable:
            return
        where = f" at {os.path.basename(site[0])}:{site[1]}" if site[0] else ""
        if all(p.grad is None for p in trainable):
            self._report(call, site,
                         f"{call}{where} ran when none of its {len(trainable)} parameters had a gradient (before "
                         "backward(), or right after zero_grad()): it does nothing, and the step that follows "
                         "uses gradients it never clipped")
            return
        ids = {id(p) for p in trainable}
        for step, probes in self._used.values():
            alive = [(ref(), gid, version) for ref, gid, version in probes if ref() is not None and id(ref()) in ids]
            if alive and all(p.grad is not None and id(p.grad) == gid and p.grad._version == version
                             for p, gid, version in alive):
                self._report(call, site,
                             f"{call}{where} ran on the gradients that optimizer.step() already used at step {step} "
                             "(no backward() since): the update it was meant to limit is already applied")
                return

    def _report(self, call: str, site: tuple[str | None, int | None], message: str) -> None:
        self.session.report(
            CLIP_TIMING, message, subject=call, path=site[0], line=site[1], key=(call, site),
            fix="order each iteration as zero_grad() → backward() → unscale_() → clip_grad_norm_() → step()")
