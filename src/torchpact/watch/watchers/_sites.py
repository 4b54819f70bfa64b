"""Where the script created each optimizer: the user's line that called the constructor."""

from __future__ import annotations

import weakref
from typing import Any

from torchpact.watch.frames import user_frames
from torchpact.watch.watcher import Watcher
from torchpact.watch.watchers._patch import Patch

_SITES: weakref.WeakKeyDictionary[Any, tuple[str, int]] = weakref.WeakKeyDictionary()
_users = 0
_patch: Patch | None = None


def _recording(init: Any) -> Any:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if self in _SITES:
            return  # a subclass's __init__ already called this one
        for frame in user_frames(2):
            if frame.f_locals.get("self") is not self:  # a user-defined subclass's own __init__
                _SITES[self] = (frame.f_code.co_filename, frame.f_lineno)
                return
    return __init__


def install() -> None:
    """Start recording optimizer constructions (reference counted across watchers)."""
    global _users, _patch
    _users += 1
    if _patch is None:
        import torch

        _patch = Patch(torch.optim.Optimizer, "__init__", _recording)


def uninstall() -> None:
    global _users, _patch
    _users = max(0, _users - 1)
    if _users == 0 and _patch is not None:
        _patch.remove()
        _patch = None


def creation_site(optimizer: Any) -> tuple[str | None, int | None]:
    """(path, line) of the user's ``Optimizer(...)`` call, or (None, None) when not seen."""
    try:
        return _SITES.get(optimizer, (None, None))
    except TypeError:
        return (None, None)


def label(optimizer: Any) -> str:
    """``Adam created at train.py:12`` or just the class name."""
    path, line = creation_site(optimizer)
    kind = type(optimizer).__name__
    if path and line:
        import os

        return f"{kind} created at {os.path.basename(path)}:{line}"
    return kind


class SiteWatcher(Watcher):
    """A watcher that names optimizers by the line that created them: records constructions while attached."""

    def attach(self, session: Any) -> None:
        super().attach(session)
        install()

    def on_close(self) -> None:
        uninstall()
