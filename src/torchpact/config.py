"""``[tool.torchpact]`` in pyproject.toml, rule selection and ``# noqa`` comments.

Keys (all optional)::

    [tool.torchpact]
    select = ["ALL"]                 # codes, code prefixes ("TP1") or categories ("memory")
    extend-select = ["TP005"]        # added to select (a --select on the command line replaces both)
    ignore = ["TP905"]
    per-file-ignores = {"tests/*" = ["TP402"]}
    severity = {TP905 = "warning"}  # severity overrides
    preview = true                   # also report findings whose blind precision is not yet
                                     # measured above the bar (see torchpact.lint.preview)
    exclude = ["build/*"]            # extra paths lint skips (gitignore syntax, relative to this file)
    extend-exclude = ["gen/"]        # the same (the built-in skips always apply, so both add)
    unsafe-fixes = true              # --fix applies the fixes that need a review too
    min-torch = "2.4"               # oldest torch the code must run on; default: what the closest
                                     # project declares (see torchpact.project), else torch 2.13

Each linted file uses the closest ``pyproject.toml`` that has a ``[tool.torchpact]`` table (as ruff
does), so a monorepo or a folder of projects gets each project's settings; ``--config`` names one for
all files (and must have the table). Unknown keys and selectors are errors, with the closest valid
name; so is a string where a list goes (``ignore = "TP101"``), as in ruff.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchpact.findings import Category, Finding, Severity
from torchpact.project import declared_torch, load_toml, parse_version, torch_requirement


class ConfigError(Exception):
    """A configuration torchpact cannot use; reported as a one-line usage error."""


SUPPORTED_TORCH = (2, 13)


@dataclass
class Config:
    """Effective settings: the file's, then the command line's on top."""

    select: list[str] = field(default_factory=lambda: ["ALL"])
    ignore: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    severity: dict[str, Severity] = field(default_factory=dict)
    exclude: list[str] = field(default_factory=list)
    min_torch: tuple[int, int] | None = None  # stated in [tool.torchpact] or on the command line
    declared_torch: tuple[int, int] | None = None  # what the project's dependencies declare
    root: Path | None = None
    # Report preview findings too (error/warning findings of codes not yet measured stable).
    preview: bool = False
    # Apply the fixes of rules whose fix may change what the program does (Rule.unsafe_fix) with --fix.
    unsafe_fixes: bool = False

    def is_enabled(self, code: str, category: str, path: str | None = None) -> bool:
        """Whether a rule runs: selected, not ignored, not ignored for this file."""
        if not any(_matches(sel, code, category) for sel in self.select):
            return False
        if any(_matches(ign, code, category) for ign in self.ignore):
            return False
        if path is not None:
            for pattern, codes in self.per_file_ignores.items():
                if _path_matches(pattern, path, self.root) and any(
                    _matches(c, code, category) for c in codes
                ):
                    return False
        return True

    def apply(self, finding: Finding) -> Finding:
        """The finding with its configured severity."""
        override = self.severity.get(finding.code)
        return finding.with_severity(override) if override else finding

    @property
    def effective_min_torch(self) -> tuple[int, int]:
        return self.min_torch or self.declared_torch or SUPPORTED_TORCH


def _matches(selector: str, code: str, category: str) -> bool:
    s = selector.strip()
    if s.upper() == "ALL":
        return True
    if s.lower() == category:
        return True
    return code.upper().startswith(s.upper())


def _path_matches(pattern: str, path: str, root: Path | None) -> bool:
    candidates = {path, Path(path).name}
    if root is not None:
        try:
            candidates.add(Path(path).resolve().relative_to(root.resolve()).as_posix())
        except (ValueError, OSError):
            pass
    return any(fnmatch.fnmatch(c, pattern) for c in candidates)


def torch_floor_from_dependencies(deps: Iterable[Any]) -> tuple[int, int] | None:
    """The oldest torch a list of PEP 508 requirements admits (``"torch>=2.4"`` -> (2, 4)), if stated."""
    return torch_requirement(deps)[1]


class Codes(Collection[str]):
    """Known codes: ``first`` (lint's) at once, ``more()`` (the runtime checks', slower to import) only
    when a lookup does not find a code among the first."""

    def __init__(self, first: Iterable[str], more: Callable[[], Iterable[str]] | None = None):
        self._first = frozenset(first)
        self._more = more
        self._rest: frozenset[str] | None = None

    def rest(self) -> frozenset[str]:
        if self._rest is None:
            self._rest = frozenset(self._more()) - self._first if self._more else frozenset()
        return self._rest

    def __iter__(self) -> Iterator[str]:
        yield from sorted(self._first)
        yield from sorted(self.rest())

    def __contains__(self, code: object) -> bool:
        return code in self._first or code in self.rest()

    def __len__(self) -> int:
        return len(self._first) + len(self.rest())


KEYS = ("select", "extend-select", "ignore", "per-file-ignores", "severity", "exclude", "extend-exclude", "min-torch",
        "preview", "unsafe-fixes")


def closest(name: str, valid: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the valid name closest to a typo, or nothing."""
    import difflib  # only for a mistake

    matches = difflib.get_close_matches(name, list(valid), n=10, cutoff=0.5)
    if not matches:
        return ""
    # among equally close names, the one with most characters in place
    best = max(matches, key=lambda m: (round(difflib.SequenceMatcher(None, name, m).ratio(), 3),
                                       sum(a == b for a, b in zip(name, m, strict=False))))  # names of any length
    return f" (did you mean {best!r}?)"


def check_selectors(selectors: Iterable[str], codes: Collection[str], where: str) -> None:
    """Raise ConfigError for a selector that selects nothing: not ALL, a category, a code or a prefix."""
    categories = [c.value for c in Category]
    for sel in selectors:
        s = sel.strip()
        if s and (s.upper() == "ALL" or s.lower() in categories or any(c.startswith(s.upper()) for c in codes)):
            continue
        hint = closest(s.upper(), [*codes, "ALL"]) or closest(s.lower(), categories)
        raise ConfigError(f"unknown selector {sel!r} in {where}{hint}")


def find_pyproject(start: Path) -> Path | None:
    """The closest pyproject.toml at or above ``start`` (a file or a folder) with a ``[tool.torchpact]``
    table: the one lint uses for the files there."""
    start = start.resolve()
    return Settings()._pyproject(start if start.is_dir() else start.parent)


def _has_section(pyproject: Path) -> bool:
    try:
        raw = pyproject.read_bytes()
    except OSError:
        return False
    if b"torchpact" not in raw:
        return False  # another project's file, whatever it holds: not parsed
    try:
        tool = load_toml(raw.decode("utf-8")).get("tool", {})
    except ValueError:
        tool = None
    if isinstance(tool, dict):
        return "torchpact" in tool
    # broken: an error when meant for torchpact (load_config says what is wrong), else another
    # project's file, none of lint's business
    return b"torchpact" in raw


def _quoted(text: str) -> str:
    """A TOML basic string (for the corrected line an error message shows)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def load_config(pyproject: Path | None, codes: Collection[str] | None = None, named: bool = False) -> Config:
    """Read ``[tool.torchpact]`` (and the torch floor the project declares beside it). With ``codes``
    (the rules' codes), selectors that select nothing are errors too. ``named``: the file was named
    (``--config``), so a file without the table is an error rather than the defaults (a wrong path
    must not silently turn the configuration off)."""
    cfg = Config()
    if pyproject is None:
        return cfg
    cfg.root = pyproject.parent.resolve()
    try:
        data = load_toml(pyproject.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # a TOMLDecodeError is a ValueError
        raise ConfigError(f"cannot read {pyproject}: {exc}") from None
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"{pyproject}: [tool] must be a table")
    if named and "torchpact" not in tool:
        raise ConfigError(f"{pyproject} has no [tool.torchpact] table: name a pyproject.toml that has one, "
                          "or leave --config out to use each file's closest")
    section = tool.get("torchpact", {})
    if not isinstance(section, dict):
        raise ConfigError(f"{pyproject}: [tool.torchpact] must be a table")
    for key in section:
        if key not in KEYS:
            raise ConfigError(f"{pyproject}: unknown key tool.torchpact.{key}{closest(key, KEYS)}")

    def str_list(key: str) -> list[str]:
        value = section.get(key, [])
        if isinstance(value, str):  # as ruff: one code is still a list (`ignore = "TP101"` is a mistake)
            raise ConfigError(f"{pyproject}: tool.torchpact.{key} must be a list of strings, not a string: "
                              f"write {key} = [{_quoted(value)}]")
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{pyproject}: tool.torchpact.{key} must be a list of strings")
        return value

    if "select" in section:
        cfg.select = str_list("select")
    # as ruff: extend-select adds to select (a --select on the command line replaces both)
    cfg.select = cfg.select + [c for c in str_list("extend-select") if c not in cfg.select]
    cfg.ignore = str_list("ignore")
    # torchpact's `exclude` never replaces the built-in skips (.git, virtualenvs, .gitignore): both add
    cfg.exclude = str_list("exclude") + str_list("extend-exclude")
    pfi = section.get("per-file-ignores", {})
    if not isinstance(pfi, dict):
        raise ConfigError(f"{pyproject}: tool.torchpact.per-file-ignores must be a table")
    for pattern, listed in pfi.items():
        if isinstance(listed, str):
            raise ConfigError(f"{pyproject}: tool.torchpact.per-file-ignores values must be lists of codes, not a "
                              f"string: write {_quoted(pattern)} = [{_quoted(listed)}]")
    cfg.per_file_ignores = dict(pfi)
    if not all(isinstance(v, list) and all(isinstance(c, str) for c in v) for v in cfg.per_file_ignores.values()):
        raise ConfigError(f"{pyproject}: tool.torchpact.per-file-ignores values must be lists of codes")
    sev = section.get("severity", {})
    if not isinstance(sev, dict):
        raise ConfigError(f"{pyproject}: tool.torchpact.severity must be a table")
    for code, level in sev.items():
        try:
            cfg.severity[code.upper()] = Severity(str(level).lower())
        except ValueError:
            raise ConfigError(
                f"{pyproject}: severity for {code} must be error, warning or info, not {level!r}"
            ) from None
    if codes is not None:
        where = f"{pyproject} tool.torchpact"
        check_selectors(cfg.select, codes, f"{where}.select / extend-select")
        check_selectors(cfg.ignore, codes, f"{where}.ignore")
        for pattern, listed in cfg.per_file_ignores.items():
            check_selectors(listed, codes, f"{where}.per-file-ignores[{pattern!r}]")
        for code in cfg.severity:
            if code not in codes:
                raise ConfigError(f"unknown code {code!r} in {where}.severity{closest(code, codes)}")
    for key in ("preview", "unsafe-fixes"):
        if key in section:
            if not isinstance(section[key], bool):
                raise ConfigError(f"{pyproject}: tool.torchpact.{key} must be true or false")
            setattr(cfg, key.replace("-", "_"), section[key])
    if "min-torch" in section:
        cfg.min_torch = parse_version(str(section["min-torch"]))
        if cfg.min_torch is None:
            raise ConfigError(f"{pyproject}: tool.torchpact.min-torch must look like \"2.4\"")
    cfg.declared_torch = declared_torch(cfg.root)[1]
    return cfg


@dataclass
class Overrides:
    """The command line's settings, put on top of every file's configuration."""

    select: list[str] | None = None
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    min_torch: tuple[int, int] | None = None
    preview: bool = False
    unsafe_fixes: bool = False

    def apply(self, cfg: Config) -> Config:
        select = self.select if self.select else cfg.select
        return dataclasses.replace(
            cfg, select=select + [c for c in self.extend_select if c not in select], ignore=cfg.ignore + self.ignore,
            min_torch=self.min_torch or cfg.min_torch, preview=self.preview or cfg.preview,
            unsafe_fixes=self.unsafe_fixes or cfg.unsafe_fixes)


class Settings:
    """The configuration of each linted file: the closest ``pyproject.toml`` with ``[tool.torchpact]``
    (or the one ``--config`` names), the command line on top, and the torch floor the file's own
    project declares when the configuration states none."""

    def __init__(self, config_file: Path | None = None, overrides: Overrides | None = None,
                 codes: Collection[str] | None = None):
        self.overrides = overrides or Overrides()
        self.codes = codes
        self._fixed = load_config(config_file, codes, named=True) if config_file is not None else None
        self._by_file: dict[Path, Config] = {}
        self._by_folder: dict[str, Config] = {}
        self._found: dict[Path, Path | None] = {}
        self._floors: dict[Path, tuple[bool, tuple[int, int] | None]] = {}

    def for_folder(self, folder: str) -> Config:
        """The configuration of the files directly in ``folder``."""
        cached = self._by_folder.get(folder)
        if cached is not None:
            return cached
        where = Path(folder).resolve()
        if self._fixed is not None:
            cfg = self._fixed
        else:
            found = self._pyproject(where)
            known = self._by_file.get(found) if found else None
            if known is None:
                known = load_config(found, self.codes)
                if found:
                    self._by_file[found] = known
            cfg = known
        cfg = self.overrides.apply(cfg)
        if cfg.min_torch is None:
            names_torch, floor = self._floor(where)
            # the closest project that names torch decides, also when it names no floor (bare ``torch``)
            cfg = dataclasses.replace(cfg, declared_torch=floor if names_torch else cfg.declared_torch)
        self._by_folder[folder] = cfg
        return cfg

    def _pyproject(self, folder: Path) -> Path | None:
        """The closest pyproject.toml at or above ``folder`` with a ``[tool.torchpact]`` table,
        remembered per folder: a tree's folders share their ancestors."""
        if folder not in self._found:
            candidate = folder / "pyproject.toml"
            if candidate.is_file() and _has_section(candidate):
                self._found[folder] = candidate
            else:
                self._found[folder] = None if folder.parent == folder else self._pyproject(folder.parent)
        return self._found[folder]

    def _floor(self, folder: Path) -> tuple[bool, tuple[int, int] | None]:
        """(whether a project names torch, its floor) for the closest folder at or above ``folder``
        whose project names torch; the search ends at a repository root (``.git``). Remembered per
        folder."""
        if folder not in self._floors:
            found, floor = declared_torch(folder)
            if found or folder.parent == folder or (folder / ".git").exists():
                self._floors[folder] = (found, floor)
            else:
                self._floors[folder] = self._floor(folder.parent)
        return self._floors[folder]

    def for_path(self, path: str) -> Config:
        """The configuration of one file (or of a folder, as its parent folder's files)."""
        return self.for_folder(os.path.dirname(os.path.abspath(path)))


NOQA_PATTERN = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?", re.I)


def noqa_codes(line: str) -> set[str] | None:
    """Codes silenced on a source line: None if no noqa, an empty set for a bare ``# noqa`` (all)."""
    if "noqa" not in line.lower():
        return None
    m = NOQA_PATTERN.search(line)
    if not m:
        return None
    codes = m.group("codes")
    if not codes:
        return set()
    return {c.upper() for c in re.split(r"[\s,]+", codes) if c}


def is_suppressed(line: str, code: str) -> bool:
    codes = noqa_codes(line)
    return codes is not None and (not codes or code.upper() in codes)
