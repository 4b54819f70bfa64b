"""Finding the user's source line: the innermost frame that is neither torch, torchpact nor stdlib."""

from __future__ import annotations

import os
import sys
import sysconfig
from typing import Any

_TORCHPACT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SKIP_PREFIXES: tuple[str, ...] | None = None


def _skip_prefixes() -> tuple[str, ...]:
    global _SKIP_PREFIXES
    if _SKIP_PREFIXES is None:
        import torch

        prefixes = [os.path.dirname(os.path.abspath(torch.__file__)) + os.sep, _TORCHPACT_DIR + os.sep]
        for key in ("stdlib", "platstdlib"):
            path = sysconfig.get_paths().get(key)
            if path:
                prefixes.append(os.path.abspath(path) + os.sep)
        _SKIP_PREFIXES = tuple(prefixes)
    return _SKIP_PREFIXES


def user_location(depth: int = 1) -> tuple[str | None, int | None]:
    """(path, line) of the innermost user frame above the caller, or (None, None)."""
    frame = user_frame(depth)
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else (None, None)


def is_user_file(filename: str) -> bool:
    """Whether a code object's file is the user's (not torch, torchpact, the stdlib or ``<string>``)."""
    if not filename or filename.startswith("<"):
        return False
    if not os.path.isabs(filename):
        filename = os.path.abspath(filename)
    return not filename.startswith(_skip_prefixes())


def user_frame(depth: int = 1) -> Any:
    """The innermost user frame above the caller (``depth`` frames up), or None."""
    frame = sys._getframe(depth + 1)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return frame
        frame = frame.f_back
    return None


def user_frames(depth: int = 1) -> list[Any]:
    """Every user frame above the caller, innermost first."""
    out = []
    frame = sys._getframe(depth + 1)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            out.append(frame)
        frame = frame.f_back
    return out


def variable_name(frame: Any, obj: Any) -> str | None:
    """The name ``frame``'s code holds ``obj`` under: a local, a global, or ``self.<attr>``."""
    if frame is None:
        return None
    for scope in (frame.f_locals, frame.f_globals):
        for name, value in list(scope.items()):
            if value is obj and not name.startswith("_"):
                return name
    self_obj = frame.f_locals.get("self")
    if self_obj is not None:
        for name, value in list(getattr(self_obj, "__dict__", {}).items()):
            if value is obj:
                return f"self.{name}"
    return None
