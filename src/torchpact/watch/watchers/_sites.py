"""Where the script created each optimizer: the user's line that called the constructor.

Recorded by a wrapper around ``torch.optim.Optimizer.__init__`` that the session owns (``OptimizerSites``):
put in when the first watcher that names optimizers attaches, taken out when the session closes; the sites
stay readable after, for the reports watchers make at close."""

from __future__ import annotations

import os
import weakref
from typing import Any

from torchpact.watch.frames import user_frames
from torchpact.watch.watcher import Watcher
from torchpact.watch.watchers._patch import Patch

# The sites of the sessions running now, for ``creation_site()`` callers that have no session at hand
# (watchers/optimizer.py's per-optimizer state): each session's recorder adds itself while it records.
_RECORDING: list[OptimizerSites] = []


class OptimizerSites:
    """The construction sites of the optimizers created while recording, one per session."""

    def __init__(self) -> None:
        self._sites: weakref.WeakKeyDictionary[Any, tuple[str, int]] = weakref.WeakKeyDictionary()
        self._patch: Patch | None = None

    def install(self) -> None:
        """Start recording optimizer constructions (once per session)."""
        if self._patch is None:
            import torch

            self._patch = Patch(torch.optim.Optimizer, "__init__", self._recording)
            _RECORDING.append(self)

    def remove(self) -> None:
        """Stop recording; what was recorded stays."""
        if self._patch is not None:
            self._patch.remove()
            self._patch = None
            _RECORDING.remove(self)

    def _recording(self, init: Any) -> Any:
        sites = self._sites

        def __init__(optimizer: Any, *args: Any, **kwargs: Any) -> None:
            init(optimizer, *args, **kwargs)
            if optimizer in sites:
                return  # a subclass's __init__ already called this one
            for frame in user_frames(2):
                if frame.f_locals.get("self") is not optimizer:  # a user-defined subclass's own __init__
                    sites[optimizer] = (frame.f_code.co_filename, frame.f_lineno)
                    return
        return __init__

    def site(self, optimizer: Any) -> tuple[str | None, int | None]:
        """(path, line) of the user's ``Optimizer(...)`` call, or (None, None) when not seen."""
        try:
            return self._sites.get(optimizer, (None, None))
        except TypeError:
            return (None, None)

    def label(self, optimizer: Any) -> str:
        """``Adam created at train.py:12`` or just the class name."""
        path, line = self.site(optimizer)
        kind = type(optimizer).__name__
        if path and line:
            return f"{kind} created at {os.path.basename(path)}:{line}"
        return kind


def creation_site(optimizer: Any) -> tuple[str | None, int | None]:
    """(path, line) of the user's ``Optimizer(...)`` call as a running session recorded it, or (None, None).
    A watcher asks its session instead (``SiteWatcher.creation_site``)."""
    for sites in reversed(_RECORDING):
        found = sites.site(optimizer)
        if found[0] is not None:
            return found
    return (None, None)


class SiteWatcher(Watcher):
    """A watcher that names optimizers by the line that created them: the session records constructions
    from the moment one attaches."""

    def attach(self, session: Any) -> None:
        super().attach(session)
        session.optimizer_sites.install()

    def creation_site(self, optimizer: Any) -> tuple[str | None, int | None]:
        """(path, line) of the user's ``Optimizer(...)`` call, or (None, None) when not seen."""
        return self.session.optimizer_sites.site(optimizer)

    def site_label(self, optimizer: Any) -> str:
        """``Adam created at train.py:12`` or just the class name."""
        return self.session.optimizer_sites.label(optimizer)
