"""The default rule set, gated by measured precision (as ruff gates new rules behind preview).

``precision.json`` (beside this module) holds, per code and severity, the blind measurement of lint's
findings: how many of those judged on projects nobody tuned the rules on were true. It is written by
``bench/lint_blind/gate.py`` from the verdicts, never by hand. A (code, severity) is **stable** when
its precision reaches the bar of its severity (``BARS``).

- Findings of every severity are reported by default only where their (code, severity) is stable (and
  at least ``MIN_JUDGED`` of them were judged): a rule is off by default until measured, infos too
  (until round 5 an unmeasured info was shown, and round 5's default set showed two, neither true);
  the others are **preview**: reported with ``--preview`` / ``preview = true``, or when the exact
  code is named in ``select`` (a prefix or a category does not enable preview findings).
- TP001 / TP002 (input problems, torchpact's own failures) are never gated.

So an upgrade of torchpact never newly fails a user's CI through an unmeasured rule.
"""

from __future__ import annotations

import json
import os
from typing import Any, NamedTuple

from torchpact.findings import Finding, Severity

BARS = {Severity.ERROR: 0.97, Severity.WARNING: 0.90, Severity.INFO: 0.80}
"""The blind precision a (code, severity) needs to be reported by default."""
MIN_JUDGED = 3
"""Blind findings a (code, severity) needs judged before its precision can turn it on by default: one or
two true findings cannot tell a rule right every time from one right half the time."""
NEVER_GATED = frozenset({"TP001", "TP002"})
DATA_FILE = os.path.join(os.path.dirname(__file__), "precision.json")


class Measure(NamedTuple):
    """One blind measurement: ``true`` of ``judged`` findings on ``corpus`` (a debatable verdict is judged
    and not true: it counts against the rule)."""

    true: int
    judged: int
    corpus: tuple[str, ...]
    commit: str
    date: str

    @property
    def precision(self) -> float:
        return self.true / self.judged if self.judged else 0.0

    def describe(self) -> str:
        return (f"blind precision {self.precision:.0%} ({self.true}/{self.judged} judged, "
                f"{len(self.corpus)} project{'s' * (len(self.corpus) != 1)}, at {self.commit}, {self.date})")


_MEASURED: dict[str, dict[Severity, Measure]] | None = None


def measured() -> dict[str, dict[Severity, Measure]]:
    """code -> severity -> Measure, from ``precision.json`` (read once per process)."""
    global _MEASURED
    if _MEASURED is None:
        _MEASURED = parse(_read())
    return _MEASURED


def _read() -> dict[str, Any]:
    try:
        with open(DATA_FILE, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def parse(data: dict[str, Any]) -> dict[str, dict[Severity, Measure]]:
    out: dict[str, dict[Severity, Measure]] = {}
    for code, by_severity in (data.get("measured") or {}).items():
        for severity, m in by_severity.items():
            out.setdefault(code, {})[Severity(severity)] = Measure(
                int(m["true"]), int(m["judged"]), tuple(m.get("corpus", ())), str(m.get("commit", "")),
                str(m.get("date", "")))
    return out


def measure(code: str, severity: Severity) -> Measure | None:
    return measured().get(code, {}).get(severity)


def stable(severity: Severity, m: Measure) -> bool:
    """Whether a measurement reaches its severity's bar with at least ``MIN_JUDGED`` judged."""
    return m.precision >= BARS[severity] and m.judged >= MIN_JUDGED


def is_preview(code: str, severity: Severity) -> bool:
    """Whether findings of ``code`` at ``severity`` are hidden unless preview is on or the code is named."""
    if code in NEVER_GATED:
        return False
    m = measure(code, severity)
    return m is None or not stable(severity, m)


def status(code: str, severity: Severity) -> str:
    """``on by default`` or ``preview``, and the measurement or ``not measured yet``, for rule pages."""
    m = measure(code, severity)
    state = "preview" if is_preview(code, severity) else "on by default"
    return f"{state} ({m.describe() if m is not None else 'not measured yet'})"


class Gate:
    """What one configuration shows: everything with ``preview``; else the stable findings and those
    of the codes named exactly in ``select``."""

    def __init__(self, preview: bool, select: list[str]):
        self.open = preview
        self.named = frozenset(s.strip().upper() for s in select)

    def hides(self, finding: Finding) -> bool:
        return not self.open and finding.code not in self.named and is_preview(finding.code, finding.severity)
