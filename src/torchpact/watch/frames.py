"""Finding the user's source line: the innermost frame that is neither torch, torchpact nor stdlib."""

from __future__ import annotations

import sys
from typing import Any

from torchpact.userframes import is_user_file

__all__ = ["is_user_file", "user_frame", "user_frames", "user_location", "variable_name"]


def user_location(depth: int = 1) -> tuple[str | None, int | None]:
    """(path, line) of the innermost user frame above the caller, or (None, None)."""
    frame = user_frame(depth)
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else (None, None)


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
