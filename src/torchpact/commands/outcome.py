"""What a command hands back, and the one place that writes it out and decides the exit code.

Each command returns an :class:`Outcome`; :func:`finish` (called by ``cli.main`` only) writes its text and
report and returns the exit code: 0 nothing at or above ``--fail-on``; 1 findings at or above it (or the
command's own failure: a fact whose verdict changed, a file ``lint --diff`` would fix); a code the command
decided itself stands first (a failed script's under ``run``). Usage errors (2) and interruptions (130) are
exceptions, turned into codes by ``cli.main``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

from torchpact.findings import Finding, Severity

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad arguments or input to torchpact itself: one line on stderr, exit 2."""


@dataclass
class Report:
    """Findings to render in ``format`` to ``output`` (stdout without one), and as a page to ``html``."""

    findings: list[Finding]
    meta: dict[str, Any]
    format: str = "text"
    output: str | None = None
    html: str | None = None
    # the text report's closing lines (counts, timings), added to text renders only
    footer: list[str] | None = None
    # SARIF's rule table and the page's Rules section also list runtime checks (lint never imports torch)
    runtime_rules: bool = True
    # summary gets torchpact_exit_code and fail_on, so that a saved report says how the command ended
    stamp_exit: bool = False
    # run: the run is over, so a file that cannot be written gives way to a temporary one (never a usage
    # error that would throw the run away), and the text report goes to stdout when --output failed
    after_run: bool = False
    # `lint - --fix`: stdout carries the fixed source, so the report goes to stderr, without colour
    to_stderr: bool = False
    # `report --html`: a saved JSON document; the page is rendered from it, and no text is written unless asked
    doc: dict[str, Any] | None = None
    # what to write instead of rendering the findings (`lint --statistics`: the counts per code)
    rendered: str | None = None


@dataclass
class Outcome:
    """What a command did: its findings and how they decide the exit code, text for stdout, a report."""

    findings: list[Finding] = field(default_factory=list)
    fail_on: str | None = None  # findings at or above this severity exit 1; None: findings decide nothing
    failed: bool = False  # the command's own verdict that something is wrong (exit 1)
    code: int | None = None  # an exit code the command decided itself (a failed script's): it stands
    exit_zero: bool = False  # lint --exit-zero: findings and failures exit 0
    text: str = ""  # written to stdout first, as is
    notes: list[str] = field(default_factory=list)  # lines for stderr, after the text
    report: Report | None = None
    # the process ran none of the user's code (it supervised the child that did): once the report is out it
    # may end without the interpreter's teardown (``cli.main``)
    supervised: bool = False

    def exit_code(self) -> int:
        if self.code:
            return self.code
        if self.exit_zero:
            return EXIT_OK
        if self.failed or self.fail_on is not None and any_at_or_above(self.findings, self.fail_on):
            return EXIT_FINDINGS
        return EXIT_OK


def any_at_or_above(findings: list[Finding], fail_on: str) -> bool:
    threshold = Severity(fail_on)
    return any(f.severity >= threshold for f in findings)


def finish(outcome: Outcome) -> int:
    """Write what ``outcome`` holds (stdout text, stderr notes, its report) and return the exit code."""
    code = outcome.exit_code()
    if outcome.text:
        sys.stdout.write(outcome.text)
        sys.stdout.flush()
    for note in outcome.notes:
        print(note, file=sys.stderr)
    if outcome.report is not None:
        _write_report(outcome.report, code, outcome.fail_on)
    return code


def _write_report(report: Report, code: int, fail_on: str | None) -> None:
    from torchpact.report import render
    from torchpact.report.text import use_color

    meta = report.meta
    on_stdout = not report.output and not report.to_stderr
    meta["color"] = report.format == "text" and on_stdout and use_color()
    if "rules" not in meta and (report.format == "sarif" or report.html):  # SARIF's table, the page's Rules
        from torchpact.docs import rule_table

        meta["rules"] = rule_table(include_runtime=report.runtime_rules)
    if report.stamp_exit:
        meta["summary"].update(torchpact_exit_code=code, fail_on=fail_on)

    def text(fmt: str, **extra: Any) -> str:
        if report.rendered is not None:
            return report.rendered
        footer = {"footer": report.footer} if fmt == "text" and report.footer else {}
        return render(fmt, report.findings, {**meta, **footer, **extra})

    if report.html:
        page = _page(report) if report.doc is not None else render("html", report.findings, meta)
        if report.after_run:
            write_report(report.html, page, what="HTML report")
        else:
            emit(page, report.html)
            print(f"torchpact: HTML report written to {report.html}", file=sys.stderr)
        if report.doc is not None and not report.output and report.format == "text":
            return  # `report --html page.html r.json`: the page was asked for, not the text
    if report.to_stderr and not report.output:
        sys.stderr.write(text(report.format))
    elif report.after_run and report.output:
        if not write_report(report.output, text(report.format)):
            sys.stdout.write(text("text", color=False))
    else:
        emit(text(report.format), report.output)


def _page(report: Report) -> str:
    from torchpact.report.html import page, rule_texts

    return page(report.doc or {}, rules=rule_texts(report.meta.get("rules")))


def emit(text: str, output: str | None) -> None:
    """``text`` to the file ``output`` (a usage error when it cannot be written), or to stdout."""
    if output:
        try:
            with open(output, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from None
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


def check_writable(path: str | None) -> None:
    """A usage error, now, when ``path`` cannot receive a report: a folder, or a folder that is missing or read-only."""
    if not path:
        return
    if os.path.isdir(path):
        raise UsageError(f"cannot write {path}: it is a folder; give a file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"cannot write {path}: no folder {folder}")
    target = path if os.path.exists(path) else folder
    if not os.access(target, os.W_OK):
        raise UsageError(f"cannot write {path}: permission denied")


def write_report(path: str, text: str, what: str = "report") -> bool:
    """Write ``text`` to ``path``; when that fails, to a temporary file whose path is printed. False then."""
    import tempfile

    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        suffix = os.path.splitext(path)[1] or ".txt"
        fd, fallback = tempfile.mkstemp(prefix="torchpact-report-", suffix=suffix)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        print(f"torchpact: cannot write {path} ({exc.strerror or exc}); the {what} is in {fallback}",
              file=sys.stderr)
        return False
    if what != "report":
        print(f"torchpact: {what} written to {path}", file=sys.stderr)
    return True
