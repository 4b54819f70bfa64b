"""Where a notebook finding is in the .ipynb file itself, for formats that only know files and lines.

Lint reports a notebook finding as (code cell, line in that cell): what the user sees. SARIF viewers
show the raw file, so the line is mapped to the line of the raw JSON that holds that source line.
"""

from __future__ import annotations

import json
import re

from torchpact.findings import Finding

_WS = re.compile(r"[ \t\n\r]*")
_PY_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")  # where Python ends lines (not at \f or U+2028)
_DECODER = json.JSONDecoder()


class NotebookLines:
    """Raw-file lines of the code cells of notebooks, read once per file."""

    def __init__(self) -> None:
        self._maps: dict[str, list[list[int]] | None] = {}

    def raw_line(self, f: Finding) -> int | None:
        """The line of the .ipynb file holding the finding's cell line, or None when unknown."""
        if not f.path or not f.cell or not f.line:
            return None
        if f.path not in self._maps:
            try:
                with open(f.path, encoding="utf-8-sig") as fh:
                    self._maps[f.path] = cell_lines(fh.read())
            except (OSError, UnicodeDecodeError):
                self._maps[f.path] = None
        cells = self._maps[f.path]
        if cells is None or f.cell > len(cells):
            return None
        lines = cells[f.cell - 1]
        return lines[f.line - 1] if f.line <= len(lines) else None


def cell_lines(text: str) -> list[list[int]] | None:
    """For each cell (markdown too: findings number cells as ruff does), the raw line (1-based) of each
    of its source lines; empty for a cell that is not code. None when ``text`` is not a notebook."""
    try:
        top = _object(text, _skip(text, 0))
        if "cells" not in top or text[top["cells"]] != "[":
            return None
        out = []
        for pos in _array(text, top["cells"]):
            cell = _object(text, pos) if text[pos] == "{" else {}
            kind = _DECODER.raw_decode(text, cell["cell_type"])[0] if "cell_type" in cell else None
            out.append(_source_lines(text, cell.get("source")) if kind == "code" else [])
        return out
    except (ValueError, IndexError, KeyError):
        return None


def _skip(text: str, pos: int) -> int:
    return _WS.match(text, pos).end()  # type: ignore[union-attr]


def _object(text: str, pos: int) -> dict[str, int]:
    """Key -> position of its value, for the JSON object at ``pos``."""
    if text[pos] != "{":
        raise ValueError("not an object")
    out: dict[str, int] = {}
    pos = _skip(text, pos + 1)
    while text[pos] != "}":
        key, pos = json.decoder.scanstring(text, pos + 1)
        pos = _skip(text, pos)
        if text[pos] != ":":
            raise ValueError("':' expected")
        value = _skip(text, pos + 1)
        out[key] = value
        pos = _skip(text, _DECODER.raw_decode(text, value)[1])
        if text[pos] == ",":
            pos = _skip(text, pos + 1)
    return out


def _array(text: str, pos: int) -> list[int]:
    """Positions of the elements of the JSON array at ``pos``."""
    out = []
    pos = _skip(text, pos + 1)
    while text[pos] != "]":
        out.append(pos)
        pos = _skip(text, _DECODER.raw_decode(text, pos)[1])
        if text[pos] == ",":
            pos = _skip(text, pos + 1)
    return out


def _source_lines(text: str, pos: int | None) -> list[int]:
    if pos is None:
        return []
    pieces = _array(text, pos) if text[pos] == "[" else [pos]
    lines: list[int] = []
    for start in pieces:
        value = _DECODER.raw_decode(text, start)[0]
        if not isinstance(value, str):
            continue
        raw = text.count("\n", 0, start) + 1  # JSON escapes newlines: a whole string sits on one raw line
        lines.extend([raw] * len(_PY_LINES.findall(value)))
    return lines
