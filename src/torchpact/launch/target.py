"""What `torchpact run` runs: a Python script (checked before anything starts) or a module (`-m`,
found as ``python -m`` finds it)."""

from __future__ import annotations

import os

PYTHON_SUFFIXES = (".py", ".pyw")
ZIPAPP_SUFFIXES = (".pyz", ".pyzw", ".zip")  # python runs these too (their __main__.py)


class LaunchError(Exception):
    """The script cannot be started (missing, a folder, unreadable, not Python): a one-line usage error."""


def check_script(script: str) -> None:
    """A :class:`LaunchError` when ``script`` cannot be run as a Python script: missing, a folder, unreadable,
    or not Python — a file whose name does not end in .py that is a notebook, a binary, a script for another
    interpreter (``#!/bin/bash``), or text Python cannot compile. A .py file runs whatever it holds: a syntax
    error in it is the script's own error, reported as Python reports it."""
    path = os.path.abspath(script)
    if not os.path.exists(path):
        raise LaunchError(f"no such script: {script}")
    if os.path.isdir(path):
        raise LaunchError(f"{script} is a folder; give the training script's .py file")
    if not os.access(path, os.R_OK):
        raise LaunchError(f"cannot read {script}")
    suffix = os.path.splitext(path)[1].lower()
    if suffix in PYTHON_SUFFIXES or suffix in ZIPAPP_SUFFIXES:
        return
    not_python = f"{script} is not a Python script"
    if suffix == ".ipynb":
        raise LaunchError(f"{not_python} but a notebook; export it first: jupyter nbconvert --to script {script}")
    try:
        with open(path, "rb") as fh:
            source = fh.read()
    except OSError as exc:
        raise LaunchError(f"cannot read {script}: {exc.strerror or exc}") from None
    first = source.split(b"\n", 1)[0].strip()
    if first.startswith(b"#!"):
        if b"python" in first:
            return  # an executable Python script without the suffix
        interpreter = first[2:].decode(errors="replace").strip()
        raise LaunchError(f"{not_python} (its first line runs {interpreter}); give the training script's .py file")
    if b"\0" in source[:8192]:
        raise LaunchError(f"{not_python} (a binary file); give the training script's .py file")
    try:
        compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        where = f" at line {exc.lineno}" if getattr(exc, "lineno", None) else ""
        raise LaunchError(f"{not_python}: it does not parse as Python ({type(exc).__name__}{where}) and its name "
                          "does not end in .py; give the training script's .py file") from None


def find_module(name: str) -> str:
    """The file ``python -m name`` would run (a package runs its ``__main__``); a :class:`LaunchError` when
    there is none. As ``python -m``, this imports the module's parent packages."""
    import importlib.util

    if name.endswith(".py") and name[:-3]:  # `-m pkg/train.py` typed as a module: nothing imported for it
        dotted = name[:-3].replace("/", ".").replace(os.sep, ".")
        raise LaunchError(f"-m takes a module name: -m {dotted}, not {name}")
    if not name or name.startswith(".") or any(not part.isidentifier() for part in name.split(".")):
        raise LaunchError(f"-m needs a module name such as package.module, not {name!r}")
    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:  # a package: its __main__
            main = importlib.util.find_spec(f"{name}.__main__")
            if main is None:
                raise LaunchError(f"{name} is a package without a __main__ module: python -m cannot run it either")
            spec = main
    except LaunchError:
        raise
    except ModuleNotFoundError as exc:
        raise LaunchError(f"no module named {exc.name or name}") from None
    except Exception as exc:  # a parent package's __init__ failed: as python -m says it
        raise LaunchError(f"error while finding module {name} ({type(exc).__name__}: {exc})") from None
    if spec is None:
        raise LaunchError(f"no module named {name}")
    if spec.origin is None or not spec.has_location:
        raise LaunchError(f"{name} has no source file to run")
    return spec.origin
