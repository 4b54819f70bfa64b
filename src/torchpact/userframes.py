"""Which source files are the user's: not torch, not torchpact, not the standard library.

Shared by ``watch`` (the user's line of a runtime finding) and ``audit`` (the model code's line of
an export or compile problem). Imports torch lazily, on the first question, to find torch's folder.
"""

from __future__ import annotations

import os
import sysconfig
from typing import Any, Callable, TypeVar

_TORCHPACT_DIR = os.path.dirname(os.path.abspath(__file__))
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


def is_user_file(filename: str) -> bool:
    """Whether a code object's file is the user's (not torch, torchpact, the stdlib or ``<string>``)."""
    if not filename or filename.startswith("<"):
        return False
    if not os.path.isabs(filename):
        filename = os.path.abspath(filename)
    return not filename.startswith(_skip_prefixes())


# Code objects of torchpact's functions that only pass a call of the script through (a wrapper around a torch
# function, the ``__call__`` set on a model's class): a warning raised beneath them is the script's, not
# torchpact's (see ``launch/warning_origin``).
PASS_THROUGH: set = set()


_F = TypeVar("_F", bound=Callable[..., Any])


def passes_through(fn: _F) -> _F:
    """Mark ``fn`` as one that only passes a call of the script on; returns ``fn``."""
    code = getattr(fn, "__code__", None)
    if code is not None:
        PASS_THROUGH.add(code)
    return fn
