"""The user's source files, read once per report, for the snippets every human-facing format shows."""

from __future__ import annotations

from torchpact.findings import Finding


class SourceCache:
    """Text of the files findings point at; ``sources`` (path -> text) wins over the disk. A notebook
    finding's text is its cell's source (its ``line`` counts in the cell)."""

    def __init__(self, sources: dict[str, str] | None = None) -> None:
        self._given = sources or {}
        self._texts: dict[str, str | None] = {}
        self._cells: dict[str, dict[int, str] | None] = {}

    def _file(self, path: str) -> str | None:
        if path not in self._texts:
            text = self._given.get(path)
            if text is None:
                try:
                    with open(path, encoding="utf-8", errors="replace") as fh:
                        text = fh.read()
                except OSError:
                    text = None
            self._texts[path] = text
        return self._texts[path]

    def text(self, f: Finding) -> str | None:
        """The whole file of a finding with a line (for a notebook, the whole cell), or None when unreadable."""
        if not f.path or not f.line:
            return None
        if f.cell:
            if f.path not in self._cells:
                self._cells[f.path] = _code_cells(self._file(f.path))
            cells = self._cells[f.path]
            return cells.get(f.cell) if cells else None
        return self._file(f.path)

    def lines(self, f: Finding) -> list[str] | None:
        """The file's (or cell's) lines when the finding's line is inside it."""
        text = self.text(f)
        if text is None:
            return None
        lines = text.splitlines()
        return lines if f.line is not None and f.line <= len(lines) else None


def _code_cells(raw: str | None) -> dict[int, str] | None:
    """Each code cell's source by its number among all cells (as findings count them), or None."""
    if raw is None:
        return None
    import json  # only for notebooks

    try:
        cells = json.loads(raw).get("cells")
    except (ValueError, AttributeError):
        return None
    if not isinstance(cells, list):
        return None
    out = {}
    for number, cell in enumerate(cells, start=1):
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            source = cell.get("source", "")
            if isinstance(source, list) and all(isinstance(s, str) for s in source):
                out[number] = "".join(source)
            elif isinstance(source, str):
                out[number] = source
    return out
