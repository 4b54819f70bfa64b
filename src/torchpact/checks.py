"""The metadata of a runtime check, shared by the watchers of ``run`` and the audits of export/compile-check.

Stdlib only (and ``findings``): ``watch`` and ``audit`` both import it, so neither imports the other.
"""

from __future__ import annotations

from typing import NamedTuple

from torchpact.findings import Category, Evidence, Severity


class Check(NamedTuple):
    """One runtime check: its stable code and its documentation page.

    ``doc`` holds the sections "What it does", "Why is this bad?" and "How to fix" (``## `` headings).
    A check that shares a code with a lint rule documents the runtime side of the same pattern.
    ``severity_note`` says when a finding is reported at another severity than ``severity``
    ("`warning` when ..."); the rule's page shows it. ``evidence`` is what its findings rest on:
    ``observed`` (the problem was seen happen), or ``inferred`` for a check that is a heuristic
    reading of what it saw.

    A ``NamedTuple``, not a frozen ``@dataclass``: every ``torchpact run`` imports it before the script
    starts, and a dataclass compiles its generated methods with ``exec`` (~0.4 ms).
    """

    code: str
    category: Category
    severity: Severity
    summary: str
    doc: str
    severity_note: str = ""
    evidence: Evidence = Evidence.OBSERVED
