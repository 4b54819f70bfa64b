"""Reading one file into Python source: plain modules and the code cells of Jupyter notebooks."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field

from torchpact.lint.edits import Edit, apply_edits
from torchpact.lint.ipython import CellCode, split_lines, transform_cell


class SourceError(Exception):
    """The file (or one notebook cell) cannot be turned into Python source; becomes an ``input`` finding."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None,
                 cell: int | None = None):
        super().__init__(message)
        self.line = line
        self.column = column
        self.cell = cell


@dataclass
class Cell:
    """A notebook code cell and where its Python lies in ``Source.text``."""

    number: int  # position among all the notebook's cells (markdown too), 1-based, as ruff counts
    original: str  # the cell's source as the notebook holds it
    code: CellCode
    start: int  # offset in Source.text of the cell's first character (after ``code.prefix``)

    def span_of(self, edit: Edit) -> tuple[int, int] | None:
        """The edit's offsets in the cell, or None when it leaves the cell or touches IPython syntax."""
        a, b = edit.start - self.start, edit.end - self.start
        if self.code.error is not None or a < 0 or b > len(self.original):
            return None
        if any(a < hi and b > lo or lo < a < hi for lo, hi in self.code.opaque):
            return None
        return a, b


@dataclass
class Source:
    """Python text of a file, and for notebooks where each line came from."""

    path: str
    text: str
    notebook: bool = False
    # For notebooks: line number in ``text`` (1-based) -> (cell number, line in cell), both 1-based.
    line_map: dict[int, tuple[int, int]] = field(default_factory=dict)
    cells: list[Cell] = field(default_factory=list)
    # Notebook cells that are not valid Python: each is a finding; the other cells are still linted.
    errors: list[SourceError] = field(default_factory=list)
    doc: dict | None = None  # the notebook's JSON
    raw: str | None = None  # the notebook file's text

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    @property
    def file_text(self) -> str:
        """What the file holds: the module's text, or the notebook's JSON."""
        return self.raw if self.raw is not None else self.text

    def locate(self, line: int) -> tuple[int | None, int]:
        """(cell, line) for a line of ``text``; cell is None outside notebooks."""
        if not self.notebook:
            return None, line
        return self.line_map.get(line, (None, line))

    def apply(self, edits: list[Edit]) -> tuple[Source, int]:
        """This source with non-overlapping edits applied; a notebook's edits go into its cells' sources
        (an edit spanning two cells or IPython syntax is left out)."""
        if not self.notebook:
            text, applied = apply_edits(self.text, edits)
            return Source(path=self.path, text=text), applied
        assert self.doc is not None and self.raw is not None
        by_cell: dict[int, list[Edit]] = {}
        for edit in edits:
            for cell in self.cells:
                span = cell.span_of(edit)
                if span is not None:
                    by_cell.setdefault(cell.number, []).append(Edit(*span, edit.replacement))
                    break
        if not by_cell:
            return self, 0
        doc = {**self.doc, "cells": list(self.doc["cells"])}  # outputs can be megabytes: copy what changes
        applied = 0
        for cell in self.cells:
            if cell.number in by_cell:
                new, n = apply_edits(cell.original, by_cell[cell.number])
                applied += n
                entry = doc["cells"][cell.number - 1] = dict(doc["cells"][cell.number - 1])
                entry["source"] = split_lines(new) if isinstance(entry.get("source"), list) else new
        return notebook_source(self.path, dump_notebook(doc, self.raw).encode("utf-8")), applied


def decode_python(data: bytes) -> str:
    """Decode as Python does (PEP 263 coding cookie, BOM), refusing binary content."""
    if b"\x00" in data[:8192]:
        raise SourceError("binary file: it contains NUL bytes, so it is not Python source")
    head = data.split(b"\n", 2)[:2]
    if not any(b"coding" in line for line in head):
        # no PEP 263 cookie: UTF-8, as tokenize.detect_encoding would say without being loaded
        try:
            return data.decode("utf-8-sig" if data.startswith(b"\xef\xbb\xbf") else "utf-8")
        except UnicodeDecodeError:
            pass  # the errors below, as for any file
    import tokenize

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        raise SourceError(f"cannot decode: {exc}") from None
    try:
        return data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        line = data[: getattr(exc, "start", 0)].count(b"\n") + 1 if isinstance(exc, UnicodeDecodeError) else None
        reason = exc.reason if hasattr(exc, "reason") else exc
        raise SourceError(f"not valid {encoding} text ({exc.__class__.__name__}: {reason})", line=line) from None


def notebook_source(path: str, data: bytes) -> Source:
    """The code cells of an .ipynb joined into one module, IPython syntax turned into Python in place
    (see ``lint/ipython.py``); a cell that is not Python even so is left out and becomes an error."""
    import json  # notebooks only

    raw = _decode_notebook(data)
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SourceError(f"broken notebook: not valid JSON ({exc})") from None
    cells = doc.get("cells") if isinstance(doc, dict) else None
    if not isinstance(cells, list):
        raise SourceError("broken notebook: no 'cells' list")
    parts: list[str] = []
    line_map: dict[int, tuple[int, int]] = {}
    placed: list[Cell] = []
    errors: list[SourceError] = []
    offset, line = 0, 1
    for number, entry in enumerate(cells, start=1):
        src = entry.get("source", "") if isinstance(entry, dict) and entry.get("cell_type") == "code" else None
        if isinstance(src, list):
            src = "".join(s for s in src if isinstance(s, str))
        if not isinstance(src, str):
            continue
        code = transform_cell(src)
        body = code.text
        if code.error is not None:
            err = code.error
            errors.append(SourceError(f"cannot parse this cell: {err.msg or 'invalid syntax'}",
                                      line=err.lineno, column=err.offset, cell=number))
            body = "".join(" " * len(ln.rstrip("\r\n")) + "\n" for ln in split_lines(src))
        else:
            parts.append(code.prefix)
            offset += len(code.prefix)
            line += code.prefix.count("\n")
        placed.append(Cell(number=number, original=src, code=code, start=offset))
        if body and not body.endswith(("\n", "\r")):
            body += "\n"
        for i in range(len(split_lines(body))):
            line_map[line + i] = (number, i + 1)
        body += "\r" if body.endswith("\r") else "\n"  # a cell's last statement ends before the next cell
        parts.append(body)
        offset += len(body)
        line += len(split_lines(body))
    return Source(path=path, text="".join(parts), notebook=True, line_map=line_map, cells=placed,
                  errors=errors, doc=doc, raw=raw)


def cell_sources(raw: str) -> dict[int, str]:
    """Each code cell's source by cell number, from a notebook's JSON text (for cell-by-cell diffs)."""
    import json

    cells = json.loads(raw).get("cells", [])
    out = {}
    for number, entry in enumerate(cells, start=1):
        if isinstance(entry, dict) and entry.get("cell_type") == "code":
            src = entry.get("source", "")
            out[number] = "".join(src) if isinstance(src, list) else str(src)
    return out


def _decode_notebook(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceError(f"broken notebook: not valid JSON ({exc})") from None


def dump_notebook(doc: dict, raw: str) -> str:
    """``doc`` as JSON laid out like ``raw`` was (indent, non-ASCII kept or escaped, line endings,
    final newline), so a fix changes only the cells it fixes."""
    import json

    m = re.match(r"\{\r?\n([ \t]+)\S", raw)
    indent = m.group(1) if m else None
    escaped = not any(ord(c) > 127 for c in raw) and "\\u" in raw
    text = json.dumps(doc, indent=indent, ensure_ascii=escaped,
                      separators=(",", ": ") if indent is not None else _separators(raw))
    if raw.endswith("\n"):
        text += "\n"
    if "\r\n" in raw:
        text = text.replace("\n", "\r\n")
    return text


def _separators(raw: str) -> tuple[str, str]:
    return ("," if re.search(r",\S", raw) else ", ", ":" if re.search(r'":\S', raw) else ": ")


def read_source(path: str) -> Source:
    """Read ``path`` as Python, whatever it is; raises SourceError with a plain reason."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise SourceError("cannot read: no such file (a dangling symlink?)") from None
    except IsADirectoryError:
        raise SourceError("cannot read: it is a directory") from None
    except OSError as exc:
        raise SourceError(f"cannot read: {exc.strerror or exc}") from None
    return source_from_bytes(path, data)


def source_from_bytes(path: str, data: bytes) -> Source:
    """``data`` read as the file ``path`` would be (a notebook when it ends in .ipynb): lint's standard input."""
    if path.endswith(".ipynb"):
        return notebook_source(path, data)
    return Source(path=path, text=decode_python(data))
