"""The one shape every torchpact finding has, whatever produced it.

Stdlib only, imports nothing of torchpact: lint, the runtime watchers, the export audit and every
reporter share these types.
"""

from __future__ import annotations

import enum
import os
from typing import Any


class Severity(str, enum.Enum):
    """How bad a finding is; ordered info < warning < error."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank >= other.rank

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank > other.rank

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank <= other.rank

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank < other.rank


_SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2}


class Evidence(str, enum.Enum):
    """What a finding rests on.

    Lint states how much of what it relied on it proved: ``must`` (every path the analysis sees is
    wrong, and every value it depends on was resolved), ``may`` (some path is wrong, or a fact holds
    on some paths only), ``unresolved`` (it depends on a callee, attribute or value the analysis
    could not see, such as a parameter taken for a model by its name). The engine caps a lint
    finding's severity by it (:func:`severity_cap`). Runtime findings say whether the problem was
    ``observed`` (seen happen) or ``inferred`` (a heuristic reading of what was seen).
    """

    MUST = "must"
    MAY = "may"
    UNRESOLVED = "unresolved"
    OBSERVED = "observed"
    INFERRED = "inferred"

    @property
    def rank(self) -> int:
        """Lint evidence ordered unresolved (0) < may (1) < must (2); runtime evidence ranks as must."""
        return _EVIDENCE_RANK[self]


_EVIDENCE_RANK = {Evidence.UNRESOLVED: 0, Evidence.MAY: 1, Evidence.MUST: 2, Evidence.OBSERVED: 2,
                  Evidence.INFERRED: 2}
LINT_EVIDENCE = (Evidence.UNRESOLVED, Evidence.MAY, Evidence.MUST)
"""Lint's evidence levels by rank."""
_CAP = (Severity.INFO, Severity.WARNING, Severity.ERROR)


def severity_cap(evidence: Evidence) -> Severity:
    """The highest severity a lint finding with this evidence may have: must -> error, may ->
    warning, unresolved -> info."""
    return _CAP[_EVIDENCE_RANK[evidence]]


class Category(str, enum.Enum):
    """What a finding is about. ``INPUT`` is for files or targets torchpact could not read."""

    MEMORY = "memory"
    AUTOGRAD = "autograd"
    NUMERICS = "numerics"
    TRAINING = "training"
    DATA = "data"
    DISTRIBUTED = "distributed"
    EXPORT = "export"
    COMPILE = "compile"
    PERFORMANCE = "performance"
    SECURITY = "security"
    INPUT = "input"


class Finding:
    """One problem, located as precisely as its source allows.

    ``line``/``column`` are 1-based (as editors and SARIF count). ``cell`` is the 1-based cell of a
    Jupyter notebook, counting every cell, markdown too, as ruff does; ``line`` then counts inside that cell.
    ``rank``/``step`` are set by the runtime watchers. ``evidence`` is what the finding rests on (:class:`Evidence`;
    None where its producer does not say). ``extra`` holds free-form facts for reports and takes no part in equality.

    Immutable (``replace`` makes a changed copy). A plain class, not a frozen ``@dataclass``: every
    ``torchpact run`` imports it before the script starts, and a dataclass compiles its generated
    methods with ``exec`` (about 1 ms for these fields).
    """

    code: str
    category: Category
    severity: Severity
    message: str
    path: str | None
    line: int | None
    column: int | None
    end_line: int | None
    end_column: int | None
    subject: str | None
    fix: str | None
    rank: int | None
    step: int | None
    cell: int | None
    evidence: Evidence | None
    extra: dict[str, Any]

    def __init__(self, code: str, category: Category, severity: Severity, message: str, path: str | None = None,
                 line: int | None = None, column: int | None = None, end_line: int | None = None,
                 end_column: int | None = None, subject: str | None = None, fix: str | None = None,
                 rank: int | None = None, step: int | None = None, cell: int | None = None,
                 evidence: Evidence | None = None, extra: dict[str, Any] | None = None) -> None:
        self.__dict__.update(code=code, category=category, severity=severity, message=message, path=path, line=line,
                             column=column, end_line=end_line, end_column=end_column, subject=subject, fix=fix,
                             rank=rank, step=step, cell=cell, evidence=evidence, extra={} if extra is None else extra)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a Finding cannot be changed (cannot assign {name!r}): use replace()")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a Finding cannot be changed (cannot delete {name!r})")

    def _key(self) -> tuple[Any, ...]:
        return tuple(map(self.__dict__.__getitem__, _FIELDS))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Finding) or other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.__dict__.items())
        return f"Finding({shown})"

    def replace(self, **changes: Any) -> "Finding":
        """A copy with ``changes`` (field name -> new value)."""
        return Finding(**{**self.__dict__, **changes})

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the report contract (enum values as plain strings)."""
        data = {name: self.__dict__[name] for name in _FIELDS}
        data["category"] = self.category.value
        data["severity"] = self.severity.value
        if self.evidence is not None:
            data["evidence"] = self.evidence.value
        if self.extra:
            data["extra"] = dict(self.extra)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Finding":
        """Inverse of :meth:`to_dict`; unknown keys go to ``extra``."""
        kwargs = {k: v for k, v in data.items() if k in _FIELDS}
        extra = dict(data.get("extra") or {})
        extra.update({k: v for k, v in data.items() if k not in _FIELDS and k != "extra"})
        kwargs["category"] = Category(kwargs["category"])
        kwargs["severity"] = Severity(kwargs["severity"])
        if kwargs.get("evidence") is not None:
            kwargs["evidence"] = Evidence(kwargs["evidence"])
        return cls(**kwargs, extra=extra)

    def with_severity(self, severity: Severity) -> "Finding":
        return self.replace(severity=severity)

    def sort_key(self) -> tuple[Any, ...]:
        return (
            self.path or "",
            self.cell or 0,
            self.line or 0,
            self.column or 0,
            self.code,
            self.rank if self.rank is not None else -1,
            self.step if self.step is not None else -1,
        )


# The fields that make a finding what it is, in report order: every annotated one but ``extra``.
_FIELDS = tuple(name for name in Finding.__annotations__ if name != "extra")

INPUT_CODE = "TP001"
"""The code of every ``input`` finding: a file or target torchpact could not read, parse or load."""


def input_finding(path: str | None, message: str, line: int | None = None,
                  column: int | None = None, fix: str | None = None) -> Finding:
    """A finding for input torchpact could not handle; the rest of the work goes on."""
    return Finding(
        code=INPUT_CODE,
        category=Category.INPUT,
        severity=Severity.ERROR,
        message=message,
        path=path,
        line=line,
        column=column,
        fix=fix,
    )


def relative_path(path: str | None, cwd: str | None = None) -> str | None:
    """``path`` relative to ``cwd`` (default: the working directory) when it lies under it, else unchanged.

    Lint reports the paths it was given; ``run`` and the audits see absolute paths in frames and
    code objects. Reporting both the same way lets ``--format github`` annotations and SARIF URIs
    map onto the repository.
    """
    if not path or path.startswith("<") or not os.path.isabs(path):
        return path
    try:
        rel = os.path.relpath(path, cwd or os.getcwd())
    except ValueError:  # another drive on Windows
        return path
    return path if rel == os.pardir or rel.startswith(os.pardir + os.sep) else rel


def with_relative_paths(findings: list[Finding], cwd: str | None = None) -> list[Finding]:
    """The findings with :func:`relative_path` applied to each path (the reporters' one entry point)."""
    return [f if relative_path(f.path, cwd) == f.path else f.replace(path=relative_path(f.path, cwd))
            for f in findings]


def summarize(findings: list[Finding]) -> dict[str, Any]:
    """Counts by severity, by code and by category, for report summaries."""
    by_severity = {s.value: 0 for s in Severity}
    by_code: dict[str, int] = {}
    by_category: dict[str, int] = {}
    for f in findings:
        by_severity[f.severity.value] += 1
        by_code[f.code] = by_code.get(f.code, 0) + 1
        by_category[f.category.value] = by_category.get(f.category.value, 0) + 1
    return {
        "total": len(findings),
        "by_severity": by_severity,
        "by_code": dict(sorted(by_code.items())),
        "by_category": dict(sorted(by_category.items())),
    }
