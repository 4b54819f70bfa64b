"""Helpers to lint snippets in tests (no files needed)."""

from __future__ import annotations

import textwrap

from torchpact.config import Config
from torchpact.findings import Finding
from torchpact.lint.edits import apply_edits
from torchpact.lint.engine import lint_source
from torchpact.lint.source import Source


def lint_code(code: str, select: list[str] | None = None, path: str = "snippet.py",
              config: Config | None = None) -> tuple[list[Finding], str]:
    """(findings, text after applying every fix once) for a snippet. Preview findings are reported
    (the rules' own tests are about what a rule finds, not about the default set) unless ``config``
    says otherwise."""
    text = textwrap.dedent(code)
    config = config or Config(preview=True, unsafe_fixes=True)  # every fix the rule offers, unsafe ones too
    if select is not None:
        config.select = select
    findings, edits = lint_source(Source(path=path, text=text), config)
    fixed, _ = apply_edits(text, edits)
    return findings, fixed


def codes(code: str, select: list[str] | None = None, **kw) -> list[str]:
    return [f.code for f in lint_code(code, select, **kw)[0]]
