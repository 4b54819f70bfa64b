"""``torchpact rule TPnnn`` and ``torchpact rules``: a rule's page, and the table of every code."""

from __future__ import annotations

import argparse
from typing import Any

from torchpact.cli import plural
from torchpact.commands.outcome import Outcome, UsageError


def execute_rule(args: argparse.Namespace) -> Outcome:
    """``torchpact rule TPnnn``: the rule's page."""
    from torchpact.docs import page

    text = page(args.code)
    if text is None:
        raise UsageError(f"no rule {args.code}; `torchpact rules` lists them")
    return Outcome(text=text)


def execute_rules(args: argparse.Namespace) -> Outcome:
    """``torchpact rules``: one line per rule, runtime check and code of lint itself, then what the columns mean."""
    from torchpact.docs import runtime_checks
    from torchpact.lint.preview import is_preview
    from torchpact.lint.registry import all_rules

    checks = runtime_checks()
    out: list[str] = []
    for r in all_rules():
        fix = ("unsafe" if r.unsafe_fix else "fix") if r.fixable else ""
        check = checks.get(r.code)
        by = "lint+run" if check else "lint    "
        default = "preview" if is_preview(r.code, r.severity) else "on"
        out.append(f"{r.code}  {r.severity.value:<7}  {default:<7}  {r.category.value:<11}  {by}  {fix:<6}  "
                   f"{r.name():<36} {r.summary()}")
        if check is not None and (check.severity != r.severity or check.severity_note):
            out.append(_runtime_severity_line(check, differs=check.severity != r.severity))
    lint_codes = {r.code for r in all_rules()}
    run_only = 0
    for code, c in sorted(checks.items()):
        if code not in lint_codes:
            run_only += 1
            out.append(f"{code}  {c.severity.value:<7}  {'':<7}  {c.category.value:<11}  run               "
                       f"{'':<36} {c.summary}")
            if c.severity_note:
                out.append(_runtime_severity_line(c, differs=False))
    from torchpact.lint.docs import SPECIAL_SEVERITY, special_codes

    special = special_codes()
    for code, text in sorted(special.items()):  # lint and run report them; no rule of their own
        title = text.splitlines()[0].split("— ", 1)[1]
        default = "off" if code == "TP005" else "on"  # TP005 runs only when selected by name
        found_by = "lint" if code == "TP005" else "lint+run"
        out.append(f"{code}  {SPECIAL_SEVERITY[code].value:<7}  {default:<7}  {'input':<11}  {found_by:<8}  "
                   f"{'fix' if code == 'TP005' else '':<6}  {'':<36} {title}")
    shared = len(lint_codes & set(checks))
    out.append(f"\n{plural(len(lint_codes), 'lint rule')} ({shared} also checked at run time), "
               f"{plural(run_only, 'runtime check')} of their own, {plural(len(special), 'code')} of lint itself "
               f"({', '.join(sorted(special))}).")
    out.append("\nfix: --fix applies it; unsafe: it may change what the program does, so --fix applies it only with "
               "--unsafe-fixes (see the rule's Fix safety).")
    out.append("preview: lint reports the rule's error and warning findings only with --preview (or its code in "
               "--select) until their blind precision is measured above the bar; its info findings, and `on` rules, by "
               "default. `torchpact rule TPnnn` shows the measure.")
    return Outcome(text="".join(line + "\n" for line in out))


def _runtime_severity_line(check: Any, differs: bool) -> str:
    """The indented line under a code whose runtime findings are reported at another severity."""
    parts = [f"at run time: {check.severity.value}"] if differs else []
    if check.severity_note:
        parts.append(check.severity_note.replace("`", ""))
    return "       " + "; ".join(parts)
