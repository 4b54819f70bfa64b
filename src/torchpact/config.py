"""``[tool.torchpact]`` in pyproject.toml, rule selection and ``# noqa`` comments.

Keys (all optional)::

    [tool.torchpact]
    select = ["ALL"]                 # codes, code prefixes ("TP1") or categories ("memory")
    ignore = ["TP905"]
    per-file-ignores = {"tests/*" = ["TP402"]}
    severity = {TP905 = "warning"}  # severity overrides
    exclude = ["build/*"]            # extra paths lint skips (gitignore syntax)
    min-torch = "2.4"               # oldest torch the code must run on; default: read from
                                     # [project] dependencies, else the installed-torch default
"""

from __future__ import annotations

import fnmatch
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from torchpact.findings import Finding, Severity

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


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
    min_torch: tuple[int, int] | None = None
    root: Path | None = None

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
        return self.min_torch or SUPPORTED_TORCH


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


def parse_version(text: str) -> tuple[int, int] | None:
    """``"2.4"`` / ``"2.4.1"`` / ``">=2.4,<3"`` -> (2, 4); None when no version is there."""
    m = re.search(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def torch_floor_from_dependencies(deps: Iterable[Any]) -> tuple[int, int] | None:
    """The oldest torch a list of PEP 508 requirements admits (``"torch>=2.4"`` -> (2, 4)), if stated."""
    for dep in deps:
        if not isinstance(dep, str):
            continue
        m = re.match(r"\s*torch\s*(\[[^\]]*\])?\s*(.*)$", dep)
        if not m or (m.group(2) and m.group(2)[0].isalnum()):
            continue  # "torchvision" and the like
        spec = m.group(2).split(";")[0]
        floor = re.search(r"(>=|==|~=|>)\s*(\d+\.\d+)", spec)
        if floor:
            return parse_version(floor.group(2))
        return None
    return None


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above ``start``."""
    start = start.resolve()
    for folder in [start, *start.parents] if start.is_dir() else [start.parent, *start.parent.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def load_config(pyproject: Path | None) -> Config:
    """Read ``[tool.torchpact]`` (and the torch floor of ``[project] dependencies``)."""
    cfg = Config()
    if pyproject is None:
        return cfg
    cfg.root = pyproject.parent
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {pyproject}: {exc}") from None
    section = data.get("tool", {}).get("torchpact", {})
    if not isinstance(section, dict):
        raise ConfigError(f"{pyproject}: [tool.torchpact] must be a table")

    def str_list(key: str) -> list[str]:
        value = section.get(key, [])
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{pyproject}: tool.torchpact.{key} must be a list of strings")
        return value

    if "select" in section:
        cfg.select = str_list("select")
    cfg.ignore = str_list("ignore")
    cfg.exclude = str_list("exclude")
    pfi = section.get("per-file-ignores", {})
    if not isinstance(pfi, dict):
        raise ConfigError(f"{pyproject}: tool.torchpact.per-file-ignores must be a table")
    cfg.per_file_ignores = {k: [v] if isinstance(v, str) else list(v) for k, v in pfi.items()}
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
    if "min-torch" in section:
        cfg.min_torch = parse_version(str(section["min-torch"]))
        if cfg.min_torch is None:
            raise ConfigError(f"{pyproject}: tool.torchpact.min-torch must look like \"2.4\"")
    else:
        project = data.get("project", {})
        cfg.min_torch = torch_floor_from_dependencies(project.get("dependencies", []) or [])
    return cfg


_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?", re.I)


def noqa_codes(line: str) -> set[str] | None:
    """Codes silenced on a source line: None if no noqa, an empty set for a bare ``# noqa`` (all)."""
    if "noqa" not in line.lower():
        return None
    m = _NOQA.search(line)
    if not m:
        return None
    codes = m.group("codes")
    if not codes:
        return set()
    return {c.upper() for c in re.split(r"[\s,]+", codes) if c}


def is_suppressed(line: str, code: str) -> bool:
    codes = noqa_codes(line)
    return codes is not None and (not codes or code.upper() in codes)
