"""``# noqa`` comments as lint reads, checks and writes them: TP005 (a torchpact code that suppresses
nothing, as ruff's RUF100) and ``--add-noqa`` (silence what is reported now, as ruff's ``--add-noqa``).

Only comments count (``tokenize``): ``"# noqa: TP101"`` inside a string is text. Codes of other
tools (``E501``, ``F401``) and a bare ``# noqa`` are never touched or reported: other linters read
them too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from torchpact.config import NOQA_PATTERN
from torchpact.findings import Category, Finding, Severity
from torchpact.lint.edits import Edit, offsets
from torchpact.lint.source import Source

UNUSED_NOQA = "TP005"
_OWN_CODE = re.compile(r"TP\d+$", re.I)
# never judged: these codes are not reported through a line's rules, so no noqa comment is used by them
_NOT_LINE_CODES = frozenset({"TP001", "TP002", UNUSED_NOQA})


@dataclass
class Directive:
    """One ``# noqa: A, B`` comment: its line in ``Source.text``, and where its codes are written."""

    line: int
    column: int  # 0-based, of the ``#`` that starts the noqa
    start: int  # offsets in Source.text of the whole noqa (from ``#`` to the last code)
    end: int
    codes_start: int  # offsets of the code list
    codes: list[str]


def directives(source: Source) -> list[Directive]:
    """Every ``# noqa`` comment with codes, in order. Nothing when the text does not tokenize (lint
    reports that file as TP001 anyway)."""
    text = source.text
    if "noqa" not in text.lower():
        return []
    import io
    import tokenize  # here: only files with a `noqa` pay for it

    starts = offsets(text)
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type != tokenize.COMMENT or "noqa" not in tok.string.lower():
                continue
            m = NOQA_PATTERN.search(tok.string)
            if m is None or not m.group("codes"):
                continue
            base = starts[tok.start[0]] + tok.start[1]
            out.append(Directive(line=tok.start[0], column=tok.start[1] + m.start(), start=base + m.start(),
                                 end=base + m.end(), codes_start=base + m.start("codes"),
                                 codes=[c.upper() for c in re.split(r"[\s,]+", m.group("codes")) if c]))
    except (tokenize.TokenError, SyntaxError):
        return []
    return out


def unused(source: Source, used: set[tuple[int, str]], lint_codes: frozenset[str], enabled: set[str],
           unfinished: set[str]) -> tuple[list[Finding], list[Edit]]:
    """TP005 findings (and their safe fixes) for each torchpact code of a ``# noqa`` that suppressed
    nothing: ``used`` holds the (line, code) pairs that did suppress a finding; ``enabled`` the codes
    that ran on this file; a rule in ``unfinished`` stopped early, so its directives are not judged."""
    findings: list[Finding] = []
    edits: list[Edit] = []
    for d in directives(source):
        own = [c for c in d.codes if _OWN_CODE.match(c) and c not in _NOT_LINE_CODES and c not in unfinished]
        dead: list[tuple[str, str]] = []
        for code in own:
            if (d.line, code) in used:
                continue
            if code not in lint_codes:
                why = f"{code} is no lint rule's code, so lint never reports it (and `run` reads no `# noqa`)"
            elif code not in enabled:
                why = f"{code} is not enabled for this file (select / ignore / per-file-ignores)"
            else:
                why = f"{code} reports nothing on this line"
            dead.append((code, why))
        if not dead:
            continue
        cell, line = source.locate(d.line)
        names = ", ".join(c for c, _ in dead)
        edit = _without(source.text, d, {c for c, _ in dead})
        findings.append(Finding(
            code=UNUSED_NOQA, category=Category.INPUT, severity=Severity.WARNING,
            message=f"`# noqa: {names}` suppresses nothing: " + "; ".join(why for _, why in dead),
            path=source.path, line=line, column=d.column + 1, cell=cell, subject=names,
            fix="remove the code from the comment (a stale suppression hides the next real finding there)",
            extra={"fixable": True, "fix_applicability": "safe"} if edit else {}))
        if edit:
            edits.append(edit)
    return findings, edits


def _without(text: str, d: Directive, dead: set[str]) -> Edit | None:
    """The edit that takes ``dead`` out of the directive; None where that would change its meaning
    (everything removed while text follows the codes: ``# noqa`` alone would silence every code)."""
    kept = [c for c in d.codes if c not in dead]
    if kept:
        return Edit(d.codes_start, d.end, ", ".join(kept))
    line_end = text.find("\n", d.end)
    rest = text[d.end:line_end if line_end >= 0 else len(text)].strip()
    if rest and not rest.startswith("#"):
        return None
    start = d.start
    while start > 0 and text[start - 1] in " \t":
        start -= 1
    return Edit(start, d.end, "")


def add_noqa(source: Source, findings: list[Finding]) -> tuple[Source, int, int]:
    """``source`` with a ``# noqa: CODE`` for each reported finding's line (merged into a noqa already
    there); returns (new source, lines changed, lines left as they were because a comment cannot go
    there: the line ends inside a string or continues with a backslash)."""
    text = source.text
    starts = offsets(text)
    inverse = {place: n for n, place in source.line_map.items()} if source.notebook else {}
    wanted: dict[int, set[str]] = {}
    for f in findings:
        if f.line is None or f.code in _NOT_LINE_CODES:
            continue
        line = inverse.get((f.cell, f.line)) if source.notebook else f.line
        if line is not None and 0 < line < len(starts):
            wanted.setdefault(line, set()).add(f.code)
    if not wanted:
        return source, 0, 0
    inside = _lines_ending_inside_tokens(text)
    existing = {d.line: d for d in directives(source)}
    edits, skipped = [], 0
    for line, codes in sorted(wanted.items()):
        end = starts[line + 1] if line + 1 < len(starts) else len(text)
        body = text[starts[line]:end].rstrip("\r\n")
        d = existing.get(line)
        if d is not None:
            merged = d.codes + sorted(codes - set(d.codes))
            if merged != d.codes:
                edits.append(Edit(d.codes_start, d.end, ", ".join(merged)))
            continue
        if NOQA_PATTERN.search(body) and "noqa" in body.lower() and _bare(body):
            continue  # a bare noqa comment silences every code already
        if line in inside or body.rstrip().endswith("\\"):
            skipped += 1
            continue
        at = starts[line] + len(body.rstrip())
        edits.append(Edit(at, starts[line] + len(body), f"  # noqa: {', '.join(sorted(codes))}"))
    if not edits:
        return source, 0, skipped
    fixed, applied = source.apply(edits)
    return fixed, applied, skipped


def _bare(line: str) -> bool:
    m = NOQA_PATTERN.search(line)
    return m is not None and not m.group("codes")


def _lines_ending_inside_tokens(text: str) -> set[int]:
    """Lines whose end lies inside a token (a triple-quoted string): a comment there would be text."""
    import io
    import tokenize

    out: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.end[0] > tok.start[0] and tok.type not in (tokenize.NL, tokenize.NEWLINE):
                out.update(range(tok.start[0], tok.end[0]))
    except (tokenize.TokenError, SyntaxError):
        pass
    return out
