"""Loading an export/compile target: ``FILE.py:FUNC`` or ``package.module:FUNC``.

FUNC takes no argument and returns ``(model, args)`` or ``(model, args, kwargs)``. Every way a target
can be unusable — missing file or module, missing function, not callable, a wrong return value, an
exception — is a :class:`TargetError` whose message is one line (the CLI prints it and exits 2).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any


class TargetError(Exception):
    """The target cannot be loaded or used; ``str()`` is one line."""


@dataclass
class Target:
    """A model with its example inputs, and where it came from."""

    spec: str
    model: Any
    args: tuple
    kwargs: dict[str, Any] = field(default_factory=dict)
    path: str | None = None  # the file FUNC is defined in, when known
    line: int | None = None  # FUNC's `def` line: where the model is handed over


def _split(spec: str) -> tuple[str, str]:
    where, sep, func = spec.rpartition(":")
    if not sep or not where or not func:
        raise TargetError(f"target must be FILE.py:FUNC or package.module:FUNC, not {spec!r}")
    if not func.isidentifier():
        raise TargetError(f"{func!r} in target {spec!r} is not a function name")
    return where, func


def _load_file(path: str) -> Any:
    if not os.path.exists(path):
        raise TargetError(f"no such file: {path}")
    if os.path.isdir(path):
        raise TargetError(f"{path} is a folder; the target is FILE.py:FUNC")
    full = os.path.abspath(path)
    name = "_torchpact_target_" + "".join(c if c.isalnum() else "_" for c in full)
    spec = importlib.util.spec_from_file_location(name, full)
    if spec is None or spec.loader is None:
        raise TargetError(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    folder = os.path.dirname(full)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)  # as `python FILE.py` would: siblings import
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        raise TargetError(f"cannot import {path}: SyntaxError at line {exc.lineno}: {exc.msg}") from None
    except Exception as exc:
        sys.modules.pop(name, None)
        raise TargetError(f"importing {path} raised {_one_line(exc, full)}") from None
    return module


def _load_module(name: str) -> Any:
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: a module of the current folder imports
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            raise TargetError(f"no module named {name!r} (nor a file {name!r})") from None
        raise TargetError(f"importing {name} raised {_one_line(exc, None)}") from None
    except Exception as exc:
        raise TargetError(f"importing {name} raised {_one_line(exc, None)}") from None


def _one_line(exc: BaseException, path: str | None) -> str:
    """``ValueError: msg (file.py:12)``: the exception and the innermost line of the user's file."""
    text = str(exc).strip().splitlines()
    where = ""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if path is None or os.path.abspath(f.filename) == path] or frames
    if mine:
        where = f" ({os.path.relpath(mine[-1].filename) if path else mine[-1].filename}:{mine[-1].lineno})"
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ") + where


def load_target(spec: str) -> Target:
    """Import the target and call FUNC; validate what it returns."""
    where, func_name = _split(spec)
    is_file = where.endswith((".py", ".pyw")) or os.sep in where or "/" in where or os.path.isfile(where)
    module = _load_file(where) if is_file else _load_module(where)
    path = os.path.abspath(where) if is_file else getattr(module, "__file__", None)
    if not hasattr(module, func_name):
        raise TargetError(f"{where} has no function {func_name!r}")
    func = getattr(module, func_name)
    if not callable(func):
        raise TargetError(f"{where}:{func_name} is a {type(func).__name__}, not a function")
    try:
        result = func()
    except Exception as exc:
        raise TargetError(f"{spec} raised {_one_line(exc, path)}") from None
    target = _validate(spec, result, path)
    try:
        import inspect

        target.line = inspect.getsourcelines(func)[1]
    except (TypeError, OSError):
        pass
    return target


def _validate(spec: str, result: Any, path: str | None) -> Target:
    import torch

    expected = "(model, args) or (model, args, kwargs)"
    if not isinstance(result, (tuple, list)) or len(result) not in (2, 3):
        got = f"a {type(result).__name__}" + (f" of length {len(result)}" if isinstance(result, (tuple, list)) else "")
        raise TargetError(f"{spec} must return {expected}, not {got}")
    model, args = result[0], result[1]
    kwargs = result[2] if len(result) == 3 else {}
    if not isinstance(model, torch.nn.Module):
        raise TargetError(f"{spec} returned a {type(model).__name__} as the model; expected a torch.nn.Module")
    if isinstance(args, torch.Tensor):
        args = (args,)  # one example tensor: the obvious meaning
    if not isinstance(args, (tuple, list)):
        raise TargetError(f"{spec} returned a {type(args).__name__} as args; expected a tuple of inputs")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise TargetError(f"{spec} returned a {type(kwargs).__name__} as kwargs; expected a dict of keyword inputs")
    return Target(spec=spec, model=model, args=tuple(args), kwargs=dict(kwargs), path=path)
