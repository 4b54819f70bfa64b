"""The user's source files, read once per report, for the snippets every human-facing format shows."""

from __future__ import annotations

from torchpact.findings import Finding


class SourceCache:
    """Text of the files findings point at; ``sources`` (path -> text) wins over the disk."""

    def __init__(self, sources: dict[str, str] | None = None) -> None:
        self._given = sources or {}
        self._texts: dict[str, str | None] = {}

    def text(self, f: Finding) -> str | None:
        """The whole file of a finding with a line (not a notebook cell), or None when unreadable."""
        if not f.path or not f.line or f.cell:
            return None
        if f.path not in self._texts:
            text = self._given.get(f.path)
            if text is None:
                try:
                    with open(f.path, encoding="utf-8", errors="replace") as fh:
                        text = fh.read()
                except OSError:
                    text = None
            self._texts[f.path] = text
        return self._texts[f.path]

    def lines(self, f: Finding) -> list[str] | None:
        """The file's lines when the finding's line is inside it."""
        text = self.text(f)
        if text is None:
            return None
        lines = text.splitlines()
        return lines if f.line is not None and f.line <= len(lines) else None
