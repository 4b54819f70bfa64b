"""Which files ``torchpact lint PATH...`` reads: Python files and notebooks, minus what is ignored."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pathspec

LINTED_SUFFIXES = (".py", ".pyw", ".ipynb")
SKIPPED_DIRS = {
    ".git", ".hg", ".svn", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox",
    ".nox", ".venv", ".direnv", "node_modules", ".ipynb_checkpoints", ".eggs", "site-packages",
}


def _is_virtualenv(path: str) -> bool:
    return os.path.exists(os.path.join(path, "pyvenv.cfg")) or os.path.exists(
        os.path.join(path, "conda-meta"))


def _gitignore(folder: str) -> pathspec.PathSpec | None:
    try:
        with open(os.path.join(folder, ".gitignore"), encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    spec = pathspec.PathSpec.from_lines("gitignore", lines)
    return spec if spec.patterns else None


def _parent_gitignores(folder: Path) -> list[tuple[str, pathspec.PathSpec]]:
    """The .gitignore files above ``folder`` up to its repository root, outermost first."""
    specs = []
    cur = folder.resolve()
    for anc in [cur, *cur.parents]:
        spec = _gitignore(str(anc))
        if spec is not None and anc != cur:
            specs.append((str(anc), spec))
        if (anc / ".git").exists():
            break
    return list(reversed(specs))


def _ignored(path: str, is_dir: bool, specs: list[tuple[str, pathspec.PathSpec]]) -> bool:
    for base, spec in specs:
        try:
            rel = os.path.relpath(path, base)
        except ValueError:
            continue
        if rel.startswith(".."):
            continue
        rel = rel.replace(os.sep, "/") + ("/" if is_dir else "")
        if spec.match_file(rel):
            return True
    return False


def discover(paths: list[str], exclude: list[str] | None = None) -> Iterator[str]:
    """Files to lint, in a stable order. Named files are always linted (whatever their suffix);
    folders are walked, skipping VCS folders, virtualenvs, caches and what .gitignore ignores."""
    extra = pathspec.PathSpec.from_lines("gitignore", exclude) if exclude else None
    seen: set[str] = set()
    for raw in paths:
        if not os.path.isdir(raw):
            if raw not in seen:
                seen.add(raw)
                yield raw
            continue
        root = os.path.abspath(raw)
        inherited = _parent_gitignores(Path(root))
        yield from _walk(raw, root, inherited, extra, seen)


def _walk(shown_root: str, root: str, inherited, extra, seen: set[str]) -> Iterator[str]:
    specs_at: dict[str, list] = {}
    own = _gitignore(root)
    specs_at[root] = inherited + ([(root, own)] if own else [])
    for folder, dirs, files in os.walk(root):
        specs = specs_at.pop(folder, None)
        if specs is None:
            specs = []
        kept = []
        for d in sorted(dirs):
            full = os.path.join(folder, d)
            if d in SKIPPED_DIRS or _is_virtualenv(full) or _ignored(full, True, specs):
                continue
            if extra is not None and extra.match_file(os.path.relpath(full, root).replace(os.sep, "/") + "/"):
                continue
            sub = _gitignore(full)
            specs_at[full] = specs + ([(full, sub)] if sub else [])
            kept.append(d)
        dirs[:] = kept
        for name in sorted(files):
            if not name.endswith(LINTED_SUFFIXES):
                continue
            full = os.path.join(folder, name)
            if _ignored(full, False, specs):
                continue
            rel = os.path.relpath(full, root)
            if extra is not None and extra.match_file(rel.replace(os.sep, "/")):
                continue
            shown = os.path.normpath(os.path.join(shown_root, rel))
            if shown not in seen:
                seen.add(shown)
                yield shown
