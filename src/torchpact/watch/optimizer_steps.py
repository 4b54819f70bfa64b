"""Which ``optimizer.step()`` calls are the script's steps: the outermost ``step()`` of each optimizer (a
subclass's ``step`` that calls ``super().step()`` runs torch's step hooks twice), and of those, the
primary optimizer's, which count the training steps."""

from __future__ import annotations

import sys
import weakref
from typing import Any

# Steps one other optimizer makes while the primary makes none, before it takes over as the step counter:
# more than any inner loop (WGAN's critic steps 5 times per generator step), and few enough that the next
# layer of a layer-wise training (pytorch/examples' forward-forward) is sampled again soon.
HANDOVER_STEPS = 20

NESTED, OTHER, PRIMARY = 0, 1, 2   # what the end of a step() is (``OptimizerSteps.leave``)


class OptimizerSteps:
    """The optimizers that stepped, in the order they first did, and which one counts the steps."""

    def __init__(self) -> None:
        self._primary: weakref.ref[Any] | None = None   # the optimizer whose steps are the script's steps
        self._since_primary: dict[int, int] = {}         # optimizer id -> its steps since the primary's last one
        self._optimizers: dict[int, weakref.ref[Any]] = {}   # by id, in the order they first stepped
        self._stepping: dict[int, int] = {}              # optimizer id -> step() calls running (nested ones included)
        self._wrapper: Any = None   # the code of the wrapper torch puts around every optimizer class's step()

    def enter(self, optimizer: Any) -> bool:
        """A ``step()`` of ``optimizer`` begins: True when it runs inside another ``step()`` of it (then it is
        no step, see ``leave``), else it is noted."""
        key = id(optimizer)
        open_steps = self._stepping.get(key, 0)
        if open_steps and not self._outer_step_frame(optimizer):
            open_steps = 0  # left open by a step() that raised
        self._stepping[key] = open_steps + 1
        if open_steps:
            return True
        primary = self._primary() if self._primary is not None else None
        if primary is None:  # first optimizer, or the old one is gone
            self._primary = weakref.ref(optimizer)
        elif primary is not optimizer:
            count = self._since_primary[key] = self._since_primary.get(key, 0) + 1
            if count >= HANDOVER_STEPS:  # the primary stopped stepping (layer-wise training): this one counts now
                self._primary = weakref.ref(optimizer)
        known = self._optimizers.get(key)
        if known is None or known() is not optimizer:
            self._optimizers.pop(key, None)  # a dead one's id, reused: this one comes last
            self._optimizers[key] = weakref.ref(optimizer)
        return False

    def leave(self, optimizer: Any) -> int:
        """A ``step()`` of ``optimizer`` ended: ``NESTED`` (no step), ``PRIMARY`` (a training step is over) or
        ``OTHER``.

        A subclass whose ``step`` calls ``super().step()`` runs torch's hooks twice when both classes' steps
        are wrapped (each class's is, once one of its instances exists): only the outermost ``step()`` is a
        step. Counted per optimizer; an entry left open by a step that raised is told from a real nesting by
        looking for an outer ``step()`` frame of the optimizer, only then (``enter``)."""
        key = id(optimizer)
        open_steps = self._stepping.get(key, 0)
        if open_steps > 1:
            self._stepping[key] = open_steps - 1
            return NESTED
        self._stepping.pop(key, None)
        if self._primary is not None and self._primary() is optimizer:
            self._since_primary.clear()
            return PRIMARY
        return OTHER

    def primary(self) -> Any:
        """The optimizer whose steps are the script's steps (None before the first step or once it is gone)."""
        return self._primary() if self._primary is not None else None

    def optimizers(self) -> list[Any]:
        """Optimizers that have stepped at least once, primary first."""
        alive = [o for o in (r() for r in self._optimizers.values()) if o is not None]
        primary = self.primary()
        if alive and alive[0] is not primary and primary is not None:  # another one took over counting steps
            alive.remove(primary)
            alive.insert(0, primary)
        return alive

    def _outer_step_frame(self, optimizer: Any) -> bool:
        if self._wrapper is None:
            import torch

            self._wrapper = torch.optim.Optimizer.profile_hook_step(lambda *a, **k: None).__code__
        wrapper = self._wrapper
        frame: Any = sys._getframe(2)
        seen = 0
        while frame is not None:
            if frame.f_code is wrapper and frame.f_locals.get("self") is optimizer:
                seen += 1
                if seen > 1:
                    return True
            frame = frame.f_back
        return False
