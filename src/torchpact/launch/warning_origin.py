"""Warnings shown where, and as often as, the script run without torchpact shows them.

Python attributes a warning to the frame ``stacklevel`` frames above the code that raised it, and with the
default filters shows it once per (text, category, that frame's module, line). Under ``torchpact run`` the
stack holds frames a plain run does not have:

- torchpact's own: a wrapper around a torch function, the ``__call__`` set on a model's class on unsampled
  steps, a ``TorchFunctionMode`` (with torch's ``handle_torch_function`` dispatch frames), the closure
  wrapper of ``step(closure)``, and ``runpy``'s frames at the bottom;
- torch's: while a global module hook is registered (on sampled steps), ``Module._call_impl`` takes its slow
  path, which calls ``forward`` from a nested ``inner()`` and sits on another line than its fast path.

So a warning raised with a ``stacklevel`` (``warnings.warn(..., stacklevel=3)`` in a ``forward``, torch's own
``stacklevel=2`` warnings called through a wrapper) lands on another frame — and, as sampled and unsampled steps
alternate, on two different ones: it was shown twice, at neither of them the line a plain run shows. The
``showwarning`` installed here finds the frame a plain run would have attributed it to (the same stacklevel
counted on the stack without those frames), undoes the bookkeeping Python did for the frame it used, and
raises the warning again at the plain run's frame with ``warnings.warn_explicit``, whose filters and
once-per-location registry then act as in a plain run. A warning that torchpact's own code caused (a watcher's
computation) is shown at the script's innermost line, as before.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any

from torchpact.userframes import PASS_THROUGH, is_user_file

_guard = threading.local()
_FAST_LINE: list[int | None] = []   # the line of Module._call_impl that calls forward when no hook is set


def _is_torchpact_file(filename: str) -> bool:
    from torchpact.launch.single import is_torchpact_frame

    return is_torchpact_frame(filename)


def _is_torch_file(filename: str, *tail: str) -> bool:
    from torchpact.launch.single import is_torch_file

    return is_torch_file(filename) and (not tail or filename.endswith(os.path.join(*tail)))


def _fast_line() -> int | None:
    """The line of ``Module._call_impl``'s fast path, ``return forward_call(*args, **kwargs)``."""
    if not _FAST_LINE:
        import torch.nn as nn

        try:
            lines, start = inspect.getsourcelines(nn.Module._call_impl)
            found = next((start + i for i, text in enumerate(lines) if "return forward_call(" in text), None)
        except (OSError, TypeError):
            found = None
        _FAST_LINE.append(found)
    return _FAST_LINE[0]


def _hooks_only_torchpact_s(module: Any) -> bool:
    """Whether ``module``'s call takes torch's slow path only because of torchpact's global hooks."""
    import torch.nn.modules.module as m

    for name in ("_backward_hooks", "_backward_pre_hooks", "_forward_hooks", "_forward_pre_hooks"):
        if getattr(module, name, None):
            return False
    for table in (m._global_backward_pre_hooks, m._global_backward_hooks, m._global_forward_hooks,
                  m._global_forward_pre_hooks):
        for hook in table.values():
            code = getattr(getattr(hook, "__func__", hook), "__code__", None)
            if code is None or not _is_torchpact_file(code.co_filename):
                return False
    return True


def _plain(frames: list[Any]) -> list[tuple[Any, int]]:
    """``frames`` (innermost first) as a plain run would have them: (frame, line) pairs."""
    out: list[tuple[Any, int]] = []
    i = 0
    while i < len(frames):
        frame = frames[i]
        filename = frame.f_code.co_filename
        if _is_torchpact_file(filename):
            i += 1
            while i < len(frames) and _is_torch_file(frames[i].f_code.co_filename, "overrides.py"):
                i += 1  # the dispatch into a TorchFunctionMode
            if out and i < len(frames) and (frames[i].f_code.co_filename, frames[i].f_code.co_name) == (
                    out[-1][0].f_code.co_filename, out[-1][0].f_code.co_name):
                i += 1  # the call that dispatched to the mode: the call the mode made stands for it
            continue
        if (frame.f_code.co_name == "inner" and i + 1 < len(frames) and _is_torch_file(filename, "nn", "modules",
                                                                                          "module.py")):
            outer = frames[i + 1]
            if outer.f_code.co_name == "_call_impl" and _hooks_only_torchpact_s(outer.f_locals.get("self")):
                fast = _fast_line()
                out.append((outer, fast if fast is not None else outer.f_lineno))
                i += 2
                continue
        out.append((frame, frame.f_lineno))
        i += 1
    return out


def _own(frames: list[Any], upto: int) -> bool:
    """Whether torchpact's own code (not a call it only passes through) raised the warning."""
    return any(_is_torchpact_file(f.f_code.co_filename) and f.f_code not in PASS_THROUGH and
               os.path.basename(f.f_code.co_filename) != "runpy.py" for f in frames[: upto + 1])


def _forget(frame: Any, message: Any, category: Any, lineno: int) -> None:
    """Undo what Python's warning registry noted for the frame it attributed the warning to."""
    registry = frame.f_globals.get("__warningregistry__")
    if isinstance(registry, dict):
        text = str(message)
        registry.pop((text, category, lineno), None)
        registry.pop((text, category), None)
        registry.pop((text, category, 0), None)


def _warnings_frames() -> list[Any]:
    """The stack from the code that raised the warning outwards (the ``warnings`` machinery left out)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename == warnings.__file__:
        frame = frame.f_back
    frames = []
    while frame is not None:
        name = frame.f_code.co_filename
        if not ("importlib" in name and "_bootstrap" in name):  # Python's stacklevel skips these too
            frames.append(frame)
        frame = frame.f_back
    return frames


@contextlib.contextmanager
def as_without_torchpact() -> Iterator[None]:
    """Show the script's warnings where and as often as a plain run shows them (see the module doc)."""
    from torchpact.watch.frames import user_location

    previous = warnings.showwarning

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        if getattr(_guard, "on", False) or file is not None:
            previous(message, category, filename, lineno, file, line)
            return
        frames = _warnings_frames()
        k = next((i for i, f in enumerate(frames) if f.f_code.co_filename == filename and f.f_lineno == lineno), None)
        if k is None:
            if _is_torchpact_file(filename):
                path, at = user_location(1)
                if path is not None:
                    filename, lineno, line = path, at, None
            previous(message, category, filename, lineno, file, line)
            return
        if _own(frames, k):  # not the script's warning: shown at its innermost line
            target = next(((f, f.f_lineno) for f in frames if is_user_file(f.f_code.co_filename)), None)
        else:
            plain = _plain(frames)
            target = plain[k] if k < len(plain) else (plain[-1] if plain else None)
        if target is None or (target[0] is frames[k] and target[1] == lineno):
            previous(message, category, filename, lineno, file, line)
            return
        _forget(frames[k], message, category, lineno)
        where, at = target
        _guard.on = True
        try:
            warnings.warn_explicit(message, category, where.f_code.co_filename, at,
                                   module=where.f_globals.get("__name__", "<string>"),
                                   registry=where.f_globals.setdefault("__warningregistry__", {}),
                                   module_globals=where.f_globals)
        finally:
            _guard.on = False

    warnings.showwarning = show
    try:
        yield
    finally:
        if warnings.showwarning is show:  # the script may have installed its own (logging.captureWarnings)
            warnings.showwarning = previous
