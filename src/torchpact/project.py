"""The oldest torch a project declares, wherever it declares it.

TP952 (``torch.load`` without ``weights_only``) depends on the oldest supported torch, so it must not be
silent or loud depending only on *where* the project states it. Read, in this order, in one folder:
``pyproject.toml`` ``[project] dependencies``, ``setup.cfg`` ``[options] install_requires``,
``setup.py``'s ``install_requires=`` (a literal list, or a name bound to one; the file is parsed,
never run), then ``requirements*.txt``. The first file that names torch is the declaration, with
or without a floor: a bare ``torch`` there is not completed from another file or an outer folder.
Stdlib only: lint never imports torch, nor runs user code.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# The distribution ``torch`` itself: not ``torch-audiomentations``, ``torch_geometric`` or ``torchvision``
# (PEP 508 names continue with letters, digits, ``-``, ``_`` or ``.``; PEP 503 compares them case-blind).
_TORCH = re.compile(r"\s*torch(?![A-Za-z0-9._-])\s*(\[[^\]]*\])?\s*(.*)$", re.IGNORECASE)


def parse_version(text: str) -> tuple[int, int] | None:
    """``"2.4"`` / ``"2.4.1"`` / ``">=2.4,<3"`` -> (2, 4); None when no version is there."""
    m = re.search(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def torch_requirement(deps: Iterable[Any]) -> tuple[bool, tuple[int, int] | None]:
    """(whether a list of PEP 508 requirements names torch, the oldest torch it admits if stated).

    Only a lower bound or a pin states a floor (``>=``, ``>``, ``==``, ``~=``). A requirement without
    one (``torch``, ``torch<3``, ``torch!=2.1.0``) lets the installer take the newest torch: it states
    no floor — it is not a floor of 0.0 — and the caller reads it as the installed torch."""
    for dep in deps:
        if not isinstance(dep, str):
            continue
        m = _TORCH.match(dep)
        if not m:
            continue  # "torchvision", "torch-audiomentations" and the like
        spec = m.group(2).split(";")[0]
        floor = re.search(r"(>=|==|~=|>)\s*(\d+\.\d+)", spec)
        return True, parse_version(floor.group(2)) if floor else None
    return False, None


def load_toml(text: str) -> dict[str, Any]:
    """``tomllib.loads``, its module loaded by the first file that needs it (a parse error is a
    ValueError)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    return tomllib.loads(text)


def declared_torch(folder: Path) -> tuple[bool, tuple[int, int] | None]:
    """(whether the project in ``folder`` names torch, its floor) from the first file that names it."""
    try:
        names = set(os.listdir(folder))  # one listing, not a stat per candidate: every folder is asked
    except OSError:
        return False, None
    for reader in (_pyproject, _setup_cfg, _setup_py, _requirements):
        try:
            deps = reader(folder, names)
        except (OSError, ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            continue  # an unreadable declaration states nothing; the rules still run
        found, floor = torch_requirement(deps)
        if found:
            return found, floor
    return False, None


def _pyproject(folder: Path, names: set[str]) -> list[Any]:
    if "pyproject.toml" not in names:
        return []
    text = (folder / "pyproject.toml").read_text(encoding="utf-8")
    if "torch" not in text:
        return []  # names no torch: not worth parsing
    project = load_toml(text).get("project", {})
    deps = project.get("dependencies") if isinstance(project, dict) else None
    return deps if isinstance(deps, list) else []


def _setup_cfg(folder: Path, names: set[str]) -> list[str]:
    if "setup.cfg" not in names:
        return []
    text = (folder / "setup.cfg").read_text(encoding="utf-8")
    if "torch" not in text:
        return []
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error as exc:
        raise ValueError(str(exc)) from None
    return parser.get("options", "install_requires", fallback="").splitlines()


def _setup_py(folder: Path, names: set[str]) -> list[Any]:
    if "setup.py" not in names:
        return []
    path = folder / "setup.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bound = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
             for t in node.targets if isinstance(t, ast.Name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "install_requires":
                    value = bound.get(kw.value.id, kw.value) if isinstance(kw.value, ast.Name) else kw.value
                    try:
                        deps = ast.literal_eval(value)
                    except (ValueError, TypeError):
                        return []  # computed at install time: nothing to read without running it
                    return list(deps) if isinstance(deps, (list, tuple)) else []
    return []


def _requirements(folder: Path, names: set[str]) -> list[str]:
    lines: list[str] = []
    found = [n for n in names if n.startswith("requirements") and n.endswith(".txt")]
    for name in sorted(found, key=lambda n: (n != "requirements.txt", n)):
        lines += [ln.split(" #")[0].strip() for ln in (folder / name).read_text(encoding="utf-8").splitlines()
                  if not ln.lstrip().startswith(("#", "-"))]
    return lines
