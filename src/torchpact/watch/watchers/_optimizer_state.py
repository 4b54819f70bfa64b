"""What the optimizer watcher knows about one optimizer (``OptimizerState``): where it was made, what its
checked steps found, and the ``.grad`` of its parameters between two steps (``GradState``).
"""

from __future__ import annotations

import linecache
import os
import re
import weakref
from typing import Any

from torchpact.watch.watchers import _sites


def _assignment_line(site: tuple[str | None, int | None, int], name: str | None) -> int | None:
    """The nearest line above the ``step()`` call, in the same function, that assigns ``name``."""
    path, line, first = site
    if not path or not line or not name or not os.path.exists(path):
        return None
    pattern = re.compile(rf"(^|;)\s*{re.escape(name)}\s*(:[^=]+)?=(?!=)")
    lines = linecache.getlines(path)
    for number in range(min(line, len(lines)), max(first, 1) - 1, -1):
        if pattern.search(lines[number - 1]):
            return number
    return None


class GradState:
    """A parameter's ``.grad`` between two steps, followed by a post-accumulate-grad hook."""

    def __init__(self, grad: weakref.ref | None, version: int) -> None:
        self.grad = grad
        self.version = version
        self.untouched = 0       # accumulations onto the untouched .grad of the previous step
        self.zeroed = False      # .grad was set to None, replaced, or modified in between


class OptimizerState:
    """What is known about one optimizer."""

    def __init__(self, ref: weakref.ref, index: int) -> None:
        self.ref = ref
        self.index = index
        self.name: str | None = None
        self.call_site: tuple[str | None, int | None] = (None, None)
        self.function_start = 1
        self.param_ids: set[int] = set()
        self.checked = 0
        self.without_grad = 0
        self.kind = ""                       # "none" / "zero": what the last bad step found
        self.pending = ""                    # this step's finding at step_pre, confirmed at step_post
        self.pre_grads: list[tuple[Any, int]] = []
        self.post_grads: dict[int, Any] = {}   # param id -> weakref of its .grad
        self.all_frozen = 0
        self.ever_trainable = False
        self.snapshots: list[tuple[weakref.ref, Any]] = []
        self.frozen_checks = 0
        self.needs_probe = False
        self.clean_windows = 0
        self.probe: dict[int, tuple[weakref.ref, GradState]] = {}
        self.handles: list[tuple[weakref.ref, Any, bool]] = []

    def created_at(self) -> int | None:
        return _assignment_line((*self.call_site, self.function_start), self.name)

    def creation(self) -> tuple[str | None, int | None]:
        """Where the optimizer comes from: the line above ``step()`` that assigns it, else the user's line that
        constructed it (a framework's loop steps it, as Lightning does from ``configure_optimizers``)."""
        line = self.created_at()
        if line:
            return self.call_site[0], line
        return _sites.creation_site(self.ref())

    def label(self) -> str:
        opt = self.ref()
        kind = type(opt).__name__ if opt is not None else "optimizer"
        return f"`{self.name}` ({kind})" if self.name else f"the {kind} optimizer"
