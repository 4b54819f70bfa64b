"""Rule pages, generated from each rule's docstring and examples (``torchpact rule``, docs/rules/).

``torchpact.docs`` combines these with the runtime checks' pages and writes docs/rules/.
"""

from __future__ import annotations

from torchpact.findings import INPUT_CODE, Severity
from torchpact.lint import preview
from torchpact.lint.rule import Rule

_SPECIAL = {
    INPUT_CODE: """# TP001 — input: a file torchpact could not read, parse or load

## What it does
Reports a file (or a run/export target) that torchpact could not read, decode, parse or load: an
unreadable or missing file, a dangling symlink, binary content, invalid UTF-8 (or invalid for the
file's coding cookie), a syntax error, code nested too deeply for Python's parser, a broken notebook.

## Why is this bad?
Nothing in that file was checked. The other files still are: one bad file never stops the run.

## Fix safety
No fix: repair or exclude the file (`exclude` in `[tool.torchpact]`, or `.gitignore`).
""",
    "TP002": """# TP002 — input: a rule did not finish a file

## What it does
Reports that one rule did not finish one file: it raised an unexpected error, or it ran past its
time budget of about one CPU-second on that file (`TORCHPACT_RULE_BUDGET` seconds when set). The
finding names the rule and the line it was checking, and the summary line lists every such rule and
place. The other rules still ran on the file.

## Why is this bad?
That rule's findings in that file may be incomplete. It is a `warning`, so the default
`--fail-on warning` does not pass a run whose findings may be missing; `--fail-on error` does. A rule
that failed is a torchpact bug, not a problem with your code: please report it with the file. A rule
out of time on a huge (often generated) file may finish with a larger `TORCHPACT_RULE_BUDGET`.

## Fix safety
No fix; exclude a generated file, raise the budget, or `--ignore` the rule for the file meanwhile.
""",
    "TP005": """# TP005 — input: a `# noqa` code that suppresses nothing

## What it does
Off by default: on only when its code is named (`--select TP005`, `--extend-select TP005`, or in
`select` / `extend-select`), as ruff's RUF100 is. Reports each torchpact code of a `# noqa: ...`
comment that silenced no finding on its line: the rule reports nothing there (any more), the rule
is not enabled for the file, or the code is no lint rule's (a typo, or a runtime check's code:
`torchpact run` reads no `# noqa`). Codes of other tools (`E501`, `F401`) and a bare `# noqa` are
left alone: other linters read them. A rule that did not finish the file (TP002) is not judged.

## Why is this bad?
A stale suppression hides the next real finding on that line, and a mistyped code silences nothing
while looking as if it did.

## Fix safety
The fix removes the unused codes from the comment (the whole `# noqa` when none is left), which
changes nothing the program does: safe. It is not offered where removing every code would leave
text after `# noqa`, which would then silence every code.
""",
}


_POLICY = {
    Severity.ERROR: ("Reported as `error` where every path the analysis sees is wrong and everything it relied on "
                     "was resolved (evidence `must`); as `warning` where only some paths are (`may`); as `info` "
                     "where it depends on something the analysis could not see (`unresolved`: a callee, an "
                     "attribute, a value known by its name only)."),
    Severity.WARNING: ("Reported as `warning` where the analysis found what it relies on (evidence `must` or "
                       "`may`), as `info` where it depends on something it could not see (`unresolved`: a "
                       "callee, an attribute, a value known by its name only)."),
    Severity.INFO: "Reported as `info`; the report says what its evidence is (`must`, `may` or `unresolved`).",
}


def evidence_section(rule: type[Rule]) -> list[str]:
    """What severity a finding gets from its evidence, what the rule relies on, and which of its
    severities are on by default (lint/preview.py)."""
    lines = ["## Evidence and default", _POLICY[rule.severity], ""]
    if rule.requires:
        lines += ["It relies on:", ""] + [f"- {fact}" for fact in rule.requires] + [""]
    lines += ["By default (`--preview`, `preview = true` or naming the code in `select` shows preview findings):", ""]
    lines += [f"- `{s.value}`: {preview.status(rule.code, s)}"
              for s in (Severity.ERROR, Severity.WARNING, Severity.INFO) if s <= rule.severity]
    return lines + [""]


SPECIAL_SEVERITY = {INPUT_CODE: Severity.ERROR, "TP002": Severity.WARNING, "TP005": Severity.WARNING}
"""The severity each of those codes is reported at."""


def special_codes() -> dict[str, str]:
    """Pages of the codes that belong to no lint rule (input problems)."""
    return dict(_SPECIAL)


def _block(code: str) -> str:
    return "```python\n" + code.strip("\n") + "\n```"


def rule_markdown(rule: type[Rule], runtime: tuple[str, str] | None = None) -> str:
    """The rule's page: title, metadata, the docstring sections, example, use instead.

    ``runtime`` is (command, severity) of the runtime check sharing the code, when there is one.
    """
    sections = rule.sections()
    lines = [f"# {rule.code} — {rule.name()}", "", rule.summary(), ""]
    severity = f"`{rule.severity.value}`"
    if runtime is not None:
        severity += f" (`torchpact lint`), `{runtime[1]}` (`{runtime[0]}`, below)"
    autofix = ("unsafe (applied by `--fix --unsafe-fixes` only: see Fix safety)" if rule.unsafe_fix else "yes (safe)"
               ) if rule.fixable else "no"
    meta = f"Category: `{rule.category.value}` · Severity: {severity} · Autofix: {autofix}"
    lines += [meta, ""]
    lines += ["## What it does", sections.get("What it does", ""), ""]
    lines += ["## Why is this bad?", sections.get("Why is this bad?", ""), ""]
    invalid = rule.invalid_examples()
    if invalid:
        lines += ["## Example", _block(invalid[0].code), ""]
    if invalid and invalid[0].fixed:
        lines += ["## Use instead", "What `--fix` writes:", "", _block(invalid[0].fixed), ""]
    elif rule.valid:
        lines += ["## Use instead", _block(rule.valid[0]), ""]
    lines += ["## Fix safety", sections.get("Fix safety", ""), ""]
    for title, body in sections.items():
        if title not in ("What it does", "Why is this bad?", "Fix safety"):
            lines += [f"## {title}", body, ""]
    lines += evidence_section(rule)
    if rule.facts:
        from torchpact.facts import claim_of  # the catalogue's modules import no torch

        lines += ["## Facts", "Rests on these behaviours of torch (`torchpact facts ID` checks one on the "
                  "installed torch):", ""]
        lines += [f"- `{f}`: {claim_of(f) or '(not in the catalogue)'}" for f in rule.facts] + [""]
    return "\n".join(lines).rstrip() + "\n"
