"""Finding the user's source line: the innermost frame that is neither torch, torchpact nor stdlib."""

from __future__ import annotations

import os
import sys
import sysconfig

_TORCHPACT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SKIP_PREFIXES: tuple[str, ...] | None = None


def _skip_prefixes() -> tuple[str, ...]:
    global _SKIP_PREFIXES
    if _SKIP_PREFIXES is None:
        import torch

        prefixes = [os.path.dirname(os.path.abspath(torch.__file__)) + os.sep, _TORCHPACT_DIR + os.sep]
        stdlib = sysconfig.get_paths().get("stdlib")
        if stdlib:
            prefixes.append(os.path.abspath(stdlib) + os.sep)
        prefixes.append("<frozen ")
        _SKIP_PREFIXES = tuple(prefixes)
    return _SKIP_PREFIXES


def user_location(depth: int = 1) -> tuple[str | None, int | None]:
    """(path, line) of the innermost user frame above the caller, or (None, None)."""
    skip = _skip_prefixes()
    frame = sys._getframe(depth)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(skip) and not filename.startswith("<"):
            return filename, frame.f_lineno
        frame = frame.f_back
    return None, None
