"""Shared helpers: each target is checked once per test session (the checks take seconds each)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

HERE = Path(__file__).parent
TARGETS = HERE / "targets.py"


def marker_line(tag: str, path: Path = TARGETS, tag_prefix: str = "# ") -> int:
    """The line of ``targets.py`` that carries the comment ``# TAG`` (or the text ``tag``)."""
    for i, text in enumerate(path.read_text().splitlines(), 1):
        if f"{tag_prefix}{tag}" in text:
            return i
    raise LookupError(tag)


@cache
def export_report(func: str, paths: tuple[str, ...] | None = None, strict_too: bool = True, file: str = "targets.py"):
    from torchpact.audit.export import PATHS, export_check
    from torchpact.audit.target import load_target

    # one torch thread: with pytest-xdist's workers on 2 cores, two threads per process stall on each op
    return export_check(load_target(f"{HERE / file}:{func}"), paths=paths or PATHS, strict_too=strict_too,
                        threads=1, budget_s=0.2)


def codes(report, at_least: str = "info") -> list[str]:
    from torchpact.findings import Severity

    return sorted(f.code for f in report.findings if f.severity >= Severity(at_least))


def only(report, code: str):
    found = [f for f in report.findings if f.code == code]
    assert len(found) == 1, [f.message for f in report.findings]
    return found[0]
