"""The findings of one watched run: recorded once per check and subject, printed as they come with
``live``, and handed to a sink after each (a rank of a distributed job saves its report as it goes)."""

from __future__ import annotations

from typing import Any, Callable, TextIO

from torchpact.checks import Check
from torchpact.findings import Finding, Severity, relative_path


class FindingLog:
    """The findings in the order they were made; ``flush`` is called after each new one."""

    def __init__(self, *, rank: int | None, live: bool, stream: TextIO, flush: Callable[[], None]) -> None:
        self.findings: list[Finding] = []
        self.rank = rank
        self.live = live
        self.stream = stream
        self._flush = flush
        self._reported: set[tuple[str, Any]] = set()

    def report(self, check: Check, message: str, *, step: int, subject: str | None = None, fix: str | None = None,
               path: str | None = None, line: int | None = None, severity: Severity | None = None, key: Any = None,
               **extra: Any) -> Finding | None:
        """Record a finding of ``check`` at ``step``; once per (code, subject or key). None for a repeat."""
        dedup = (check.code, key if key is not None else subject)
        if dedup in self._reported:
            return None
        self._reported.add(dedup)
        finding = Finding(
            code=check.code, category=check.category, severity=severity or check.severity,
            message=message, path=path, line=line, subject=subject, fix=fix,
            step=step, rank=self.rank, evidence=check.evidence, extra=extra)
        self.add(finding)
        return finding

    def add(self, finding: Finding) -> None:
        """Record ``finding`` as it is (no deduplication)."""
        self.findings.append(finding)
        if self.live:
            where = f" {relative_path(finding.path)}:{finding.line}" if finding.path and finding.line else ""
            step = f" step {finding.step}" if finding.step is not None else ""
            rank = f" rank {finding.rank}" if finding.rank is not None else ""
            print(f"torchpact: {finding.code} {finding.severity.value}{rank}{step}{where}: {finding.message}",
                  file=self.stream, flush=True)
        self._flush()
