"""One open document as lint sees it: its unsaved text linted exactly as ``torchpact lint`` lints the
file (the file's configuration, the project's facts, ``# noqa``), and the findings and fixes placed in
the editor's coordinates. Nothing here knows the protocol: positions are (line, unit) pairs, 0-based,
in the client's code units (UTF-16 unless the client chose another encoding).

Lines are split where LSP and Python's parser both split them (``\\r\\n``, ``\\r``, ``\\n``), so a finding's
line is the editor's line even where ``str.splitlines`` would split more (form feeds, ``\\u2028``).
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from torchpact.config import Config
from torchpact.findings import Finding
from torchpact.lint.edits import Edit, offsets
from torchpact.lint.engine import FileResult, lint_file
from torchpact.lint.project import ProjectFacts

Units = Callable[[str], int]
_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.M)


def utf16_units(text: str) -> int:
    """LSP's default position unit: UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


class Positions:
    """Converts between character offsets / lint's 1-based (line, column) and LSP positions."""

    def __init__(self, text: str, units: Units = utf16_units):
        self.text = text
        self.units = units
        self.starts = offsets(text)[1:]  # 0-based line -> offset of its first character

    def line_text(self, line: int) -> str:
        """A 0-based line's text without its line break."""
        if line >= len(self.starts):
            return ""
        end = self.starts[line + 1] if line + 1 < len(self.starts) else len(self.text)
        return self.text[self.starts[line]:end].rstrip("\r\n")

    def at_offset(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.starts, offset) - 1
        return line, self.units(self.text[self.starts[line]:offset])

    def at(self, line: int, column: int | None) -> tuple[int, int]:
        """A finding's 1-based line and 1-based character column (None: the line's start)."""
        line = max(0, min(line - 1, len(self.starts) - 1))
        text = self.line_text(line)
        col = min(max((column or 1) - 1, 0), len(text))
        return line, self.units(text[:col])

    def end_of(self, line: int) -> tuple[int, int]:
        """The end of a 1-based line."""
        line = max(0, min(line - 1, len(self.starts) - 1))
        return line, self.units(self.line_text(line))

    def offset(self, line: int, unit: int) -> int:
        """The character offset of an LSP position."""
        if line >= len(self.starts):
            return len(self.text)
        text = self.line_text(line)
        count = 0
        for i, ch in enumerate(text):
            if count >= unit:
                return self.starts[line] + i
            count += self.units(ch)
        return self.starts[line] + len(text)

    def finding_range(self, f: Finding) -> tuple[tuple[int, int], tuple[int, int]]:
        """Where a finding lies: its columns when known, else its whole line."""
        if f.line is None:
            return (0, 0), (0, 0)
        start = self.at(f.line, f.column)
        if f.end_line is not None and f.end_column is not None:
            end = self.at(f.end_line, f.end_column)
        else:
            end = self.end_of(f.line)
        return start, max(start, end)

    def edit_range(self, edit: Edit) -> tuple[tuple[int, int], tuple[int, int]]:
        return self.at_offset(edit.start), self.at_offset(edit.end)


def encoded(text: str) -> bytes:
    """The editor's text as the bytes a saved file would hold: a PEP 263 coding cookie is honoured, as
    lint honours it when it reads the file."""
    raw = text.encode("utf-8", "surrogatepass")
    m = _COOKIE.search(b"\n".join(raw.split(b"\n", 2)[:2]))
    if m is not None:
        try:
            return text.encode(m.group(1).decode("ascii"))
        except (LookupError, UnicodeError):
            pass  # lint reports the file as it would report a bad cookie on disk
    return raw


@dataclass
class Cell:
    """A notebook cell as the editor holds it: its own document."""

    uri: str
    code: bool
    text: str


def notebook_bytes(cells: Sequence[Cell]) -> bytes:
    """The cells as an .ipynb, so a notebook open in the editor is linted as the file is (cell numbers
    count every cell, as lint counts them)."""
    doc = {"cells": [{"cell_type": "code" if c.code else "markdown", "metadata": {}, "source": c.text,
                      **({"outputs": [], "execution_count": None} if c.code else {})} for c in cells],
           "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(doc).encode("utf-8")


@dataclass
class Entry:
    """One finding placed in one editor document, with its fix (edits placed in that document)."""

    uri: str
    finding: Finding
    range: tuple[tuple[int, int], tuple[int, int]]
    fix: list[tuple[tuple[tuple[int, int], tuple[int, int]], str]] = field(default_factory=list)
    unsafe: bool = False


@dataclass
class Linted:
    """A document's lint: the result, and its findings placed in the editor's documents."""

    result: FileResult
    entries: list[Entry]
    texts: dict[str, str]  # uri -> the text the entries were placed in

    def positions(self, uri: str, units: Units) -> Positions:
        return Positions(self.texts.get(uri, ""), units)


def lint_document(path: str, uri: str, text: str, config: Config, facts: ProjectFacts | None,
                  units: Units = utf16_units, fix: bool = False) -> Linted:
    """Lint a plain Python document's unsaved text as the file ``path``."""
    result = lint_file(path, config, fix=fix, data=encoded(text), project=facts)
    pos = Positions(text, units)
    fixes = {id(f): (edits, unsafe) for f, edits, unsafe in result.fixes}
    entries = []
    for f in result.findings:
        edits, unsafe = fixes.get(id(f), ((), False))
        entries.append(Entry(uri, f, pos.finding_range(f), [(pos.edit_range(e), e.replacement) for e in edits],
                             unsafe))
    return Linted(result, entries, {uri: text})


def lint_notebook(path: str, cells: Sequence[Cell], config: Config, facts: ProjectFacts | None,
                  units: Units = utf16_units, fix: bool = False) -> Linted:
    """Lint a notebook's unsaved cells as the file ``path`` (.ipynb); each finding goes to its cell."""
    from torchpact.lint.source import notebook_source

    data = notebook_bytes(cells)
    result = lint_file(path, config, fix=fix, data=data, project=facts)
    placed = {c.number: c for c in notebook_source(path, data).cells} if result.fixes else {}
    fixes = {id(f): (edits, unsafe) for f, edits, unsafe in result.fixes}
    entries = []
    for f in result.findings:
        number = f.cell if f.cell is not None and 0 < f.cell <= len(cells) else None
        cell = cells[number - 1] if number is not None else next((c for c in cells if c.code), None)
        if cell is None:
            continue
        pos = Positions(cell.text, units)
        edits, unsafe = fixes.get(id(f), ((), False))
        moved: list[tuple[tuple[tuple[int, int], tuple[int, int]], str]] = []
        where = placed.get(number) if number is not None else None
        for e in edits:
            span = where.span_of(e) if where is not None else None
            if span is None:
                moved = []  # a fix that leaves its cell (or touches IPython syntax) is not offered
                break
            moved.append((pos.edit_range(Edit(*span, e.replacement)), e.replacement))
        entries.append(Entry(cell.uri, f, pos.finding_range(f), moved, unsafe))
    return Linted(result, entries, {c.uri: c.text for c in cells})


def noqa_edit(text: str, finding: Finding) -> tuple[int, int, str] | None:
    """The edit (offsets into ``text``, a plain module or one cell) that silences ``finding`` on its line
    with ``# noqa: CODE``, merged into a noqa already there; None where no comment can go."""
    from torchpact.lint.noqa import add_noqa
    from torchpact.lint.source import Source

    if finding.line is None:
        return None
    fixed, changed, _ = add_noqa(Source(path="", text=text), [finding.replace(cell=None)])
    return _difference(text, fixed.text) if changed else None


def _difference(old: str, new: str) -> tuple[int, int, str]:
    """One replacement turning ``old`` into ``new``: their common start and end kept."""
    start = 0
    limit = min(len(old), len(new))
    while start < limit and old[start] == new[start]:
        start += 1
    end = 0
    while end < limit - start and old[-1 - end] == new[-1 - end]:
        end += 1
    return start, len(old) - end, new[start:len(new) - end]


def whole_text_edit(old: str, new: str) -> tuple[int, int, str]:
    """The replacement that turns a document's text into its fixed text (the changed middle only)."""
    return _difference(old, new)
