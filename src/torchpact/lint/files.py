"""Which files ``torchpact lint PATH...`` reads: Python files and notebooks, minus what is ignored."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from torchpact.config import Config

if TYPE_CHECKING:
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
    import pathspec  # here: a folder without .gitignore and exclusions needs none of it

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


Excluded = Callable[[str, bool], bool]


def discover(paths: list[str], excluded: Excluded | None = None, force_exclude: bool = False) -> Iterator[str]:
    """Files to lint, in a stable order. Folders are walked, skipping VCS folders, virtualenvs, caches,
    what .gitignore ignores and what ``excluded(path, is_dir)`` (the configuration) says.

    A path named on the command line is linted even when it is inside a virtualenv or an excluded or
    ignored folder, and a named file whatever its suffix, as ruff does; ``force_exclude`` (ruff's
    ``--force-exclude``) applies the skips and the configured exclusions to named paths too.
    """
    excluded = excluded or (lambda path, is_dir: False)
    seen: set[str] = set()
    for raw in paths:
        if force_exclude and _force_excluded(raw, excluded):
            continue
        if not os.path.isdir(raw):
            if raw not in seen:
                seen.add(raw)
                yield raw
            continue
        root = os.path.abspath(raw)
        inherited = _parent_gitignores(Path(root))
        yield from _walk(raw, root, inherited, excluded, seen)


def excluded_by(config_of: Callable[[str], Config]) -> Excluded:
    """``excluded(path, is_dir)`` from each path's configuration: its ``exclude`` patterns (gitignore
    syntax) are relative to the folder of the pyproject.toml they come from (else the working directory)."""
    specs: dict[tuple[str, ...], pathspec.PathSpec] = {}

    def excluded(path: str, is_dir: bool) -> bool:
        cfg = config_of(path)
        if not cfg.exclude:
            return False
        key = tuple(cfg.exclude)
        spec = specs.get(key)
        if spec is None:
            import pathspec

            spec = specs[key] = pathspec.PathSpec.from_lines("gitignore", cfg.exclude)
        root = os.path.join(str(cfg.root) if cfg.root else os.getcwd(), "")
        full = os.path.abspath(path)
        if not full.startswith(root):
            full = os.path.realpath(path)  # reached through a symlink: the root is a resolved path
            if not full.startswith(root):
                return False
        rel = full[len(root):].replace(os.sep, "/")
        return bool(rel) and spec.match_file(rel + ("/" if is_dir else ""))

    return excluded


def _force_excluded(raw: str, excluded: Excluded) -> bool:
    """Whether a named path is excluded or git-ignored, or a folder above it (below the working
    directory) is a skipped folder or excluded."""
    path = Path(os.path.abspath(raw))
    if excluded(str(path), path.is_dir()) or _ignored(str(path), path.is_dir(), _parent_gitignores(path)):
        return True
    if path.is_dir() and (path.name in SKIPPED_DIRS or _is_virtualenv(str(path))):
        return True
    cwd = Path.cwd()
    for folder in path.parents:
        if folder == cwd or cwd not in folder.parents:
            break
        if folder.name in SKIPPED_DIRS or _is_virtualenv(str(folder)) or excluded(str(folder), True):
            return True
    return False


def _walk(shown_root: str, root: str, inherited, excluded: Excluded, seen: set[str]) -> Iterator[str]:
    specs_at: dict[str, list] = {}
    own = _gitignore(root)
    specs_at[root] = inherited + ([(root, own)] if own else [])
    # Per walked folder: (ignored, excluded). Inside a named folder that is itself ignored or
    # excluded, what is so only because it lies there is still linted: the user asked for it.
    status = {root: (_ignored(root, True, specs_at[root]), excluded(root, True))}
    for folder, dirs, files in os.walk(root):
        specs = specs_at.pop(folder, None)
        if specs is None:
            specs = []
        folder_ignored, folder_excluded = status.pop(folder, (False, False))
        kept = []
        for d in sorted(dirs):
            full = os.path.join(folder, d)
            if d in SKIPPED_DIRS or _is_virtualenv(full):
                continue
            ignored, excl = _ignored(full, True, specs), excluded(full, True)
            if ignored and not folder_ignored or excl and not folder_excluded:
                continue
            sub = _gitignore(full)
            specs_at[full] = specs + ([(full, sub)] if sub else [])
            status[full] = (ignored, excl)
            kept.append(d)
        dirs[:] = kept
        for name in sorted(files):
            if not name.endswith(LINTED_SUFFIXES):
                continue
            full = os.path.join(folder, name)
            if _ignored(full, False, specs) and not folder_ignored or excluded(full, False) and not folder_excluded:
                continue
            shown = os.path.normpath(os.path.join(shown_root, os.path.relpath(full, root)))
            if shown not in seen:
                seen.add(shown)
                yield shown
