"""The exit code's one rule (commands.outcome): a command's own code first, then --exit-zero, then its own
verdict or a finding at or above --fail-on."""

from __future__ import annotations

import pytest

from torchpact.commands.outcome import EXIT_FINDINGS, EXIT_OK, Outcome
from torchpact.findings import Category, Finding, Severity


def _finding(severity: Severity) -> Finding:
    return Finding(code="TP101", category=Category.MEMORY, severity=severity, message="m", path="t.py", line=1)


@pytest.mark.parametrize("outcome,code", [
    (Outcome(), EXIT_OK),
    (Outcome(findings=[_finding(Severity.WARNING)]), EXIT_OK),  # no --fail-on: findings decide nothing
    (Outcome(findings=[_finding(Severity.WARNING)], fail_on="warning"), EXIT_FINDINGS),
    (Outcome(findings=[_finding(Severity.INFO)], fail_on="warning"), EXIT_OK),
    (Outcome(findings=[_finding(Severity.ERROR)], fail_on="info"), EXIT_FINDINGS),
    (Outcome(failed=True), EXIT_FINDINGS),  # facts: a verdict changed; lint --diff: a file would change
    (Outcome(failed=True, exit_zero=True), EXIT_OK),
    (Outcome(findings=[_finding(Severity.ERROR)], fail_on="error", exit_zero=True), EXIT_OK),
    (Outcome(findings=[_finding(Severity.ERROR)], fail_on="error", code=137), 137),  # a killed script's code
    (Outcome(code=3, exit_zero=True), 3),
    (Outcome(code=0, findings=[_finding(Severity.ERROR)], fail_on="error"), EXIT_FINDINGS),  # the script passed
])
def test_exit_code(outcome, code):
    assert outcome.exit_code() == code
