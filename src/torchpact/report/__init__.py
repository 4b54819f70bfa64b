"""Reporters: findings in, bytes out. They present; they never compute."""

from __future__ import annotations

from typing import Any, Callable

from torchpact.findings import Finding, with_relative_paths


def render(fmt: str, findings: list[Finding], meta: dict[str, Any]) -> str:
    """Render ``findings`` in ``fmt`` (text, json, sarif, github, html).

    Every command's findings pass here, so paths under the working directory are reported relative
    to it in every format, whichever command found them.
    """
    return FORMATS[fmt](with_relative_paths(findings), meta)


def one_line(f: Finding) -> str:
    """The message and the fix as one line, for formats with a single text field (SARIF, GitHub)."""
    if not f.fix:
        return f.message
    return f.message.rstrip() + ("" if f.message.rstrip().endswith((".", "!", "?")) else ".") + f" Fix: {f.fix}"


def _text(findings, meta):
    if meta.get("color"):  # a terminal, NO_COLOR unset: rich's grouped, coloured report
        try:
            from torchpact.report.terminal import render_terminal
        except ImportError:  # rich missing: the plain report, coloured by hand
            pass
        else:
            return render_terminal(findings, meta)
    from torchpact.report.text import render_text
    return render_text(findings, meta)


def _json(findings, meta):
    from torchpact.report.json import render_json
    return render_json(findings, meta)


def _sarif(findings, meta):
    from torchpact.report.sarif import render_sarif
    return render_sarif(findings, meta)


def _github(findings, meta):
    from torchpact.report.github import render_github
    return render_github(findings, meta)


def _html(findings, meta):
    from torchpact.report.html import render_html
    return render_html(findings, meta)


FORMATS: dict[str, Callable[[list[Finding], dict[str, Any]], str]] = {
    "text": _text, "json": _json, "sarif": _sarif, "github": _github, "html": _html,
}
