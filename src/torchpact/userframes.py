"""Which source files are the user's: not torch, not torchpact, not the standard library.

Shared by ``watch`` (the user's line of a runtime finding) and ``audit`` (the model code's line of
an export or compile problem). Imports torch lazily, on the first question, to find torch's folder.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, TypeVar

_TORCHPACT_DIR = os.path.dirname(os.path.abspath(__file__))
_SKIP_PREFIXES: tuple[str, ...] | None = None


def _skip_prefixes() -> tuple[str, ...]:
    global _SKIP_PREFIXES
    if _SKIP_PREFIXES is None:
        import torch

        prefixes = [os.path.dirname(os.path.abspath(torch.__file__)) + os.sep, _TORCHPACT_DIR + os.sep]
        prefixes += [os.path.abspath(path) + os.sep for path in stdlib_dirs() if path]
        _SKIP_PREFIXES = tuple(prefixes)
    return _SKIP_PREFIXES


def stdlib_dirs() -> list[str | None]:
    """sysconfig's ``stdlib`` and ``platstdlib`` paths (in a virtual environment the second is the environment's
    lib folder, its site-packages included). On POSIX without importing sysconfig, whose data module would
    otherwise join the script's own modules (a few ms of every run's start-up)."""
    if os.name != "posix":
        import sysconfig

        return [sysconfig.get_paths().get(key) for key in ("stdlib", "platstdlib")]
    lib = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    return [os.path.join(sys.base_prefix, sys.platlibdir, lib), os.path.join(sys.exec_prefix, sys.platlibdir, lib)]


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
