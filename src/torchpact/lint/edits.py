"""Text edits for autofixes, positioned the way ``ast`` positions nodes."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Edit:
    """Replace ``text[start:end]`` (character offsets into the file's text) with ``replacement``."""

    start: int
    end: int
    replacement: str



def offsets(text: str) -> list[int]:
    """Character offset of the start of each line (1-based index = line number)."""
    starts = [0, 0]
    for m in re.finditer(r"\r\n|\r|\n", text):
        starts.append(m.end())
    return starts


class Locator:
    """Turns AST positions (line, UTF-8 byte column) into character offsets for edits."""

    def __init__(self, text: str):
        self.text = text
        self.starts = offsets(text)

    def offset(self, line: int, col_bytes: int) -> int:
        start = self.starts[line]
        end = self.starts[line + 1] if line + 1 < len(self.starts) else len(self.text)
        raw = self.text[start:end]
        return start + len(raw.encode("utf-8")[:col_bytes].decode("utf-8", "ignore"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.offset(node.lineno, node.col_offset),
                self.offset(node.end_lineno, node.end_col_offset))

    def replace(self, node: ast.AST, replacement: str) -> Edit:
        start, end = self.span(node)
        return Edit(start, end, replacement)

    def insert_after(self, node: ast.AST, text: str) -> Edit:
        end = self.span(node)[1]
        return Edit(end, end, text)

    def source(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]


def apply_edits(text: str, edits: Iterable[Edit]) -> tuple[str, int]:
    """Apply non-overlapping edits (later ones that overlap are skipped); returns (text, applied)."""
    chosen: list[Edit] = []
    last_end = -1
    for e in sorted(set(edits), key=lambda e: (e.start, e.end)):
        if e.start < last_end:
            continue
        chosen.append(e)
        last_end = max(last_end, e.end)
    for e in reversed(chosen):
        text = text[: e.start] + e.replacement + text[e.end:]
    return text, len(chosen)
