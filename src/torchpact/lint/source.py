"""Reading one file into Python source: plain modules and the code cells of Jupyter notebooks."""

from __future__ import annotations

import json
import re
import tokenize
import io
from dataclasses import dataclass, field


class SourceError(Exception):
    """The file cannot be turned into Python source; becomes an ``input`` finding."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        super().__init__(message)
        self.line = line
        self.column = column


@dataclass
class Source:
    """Python text of a file, and for notebooks where each line came from."""

    path: str
    text: str
    notebook: bool = False
    # For notebooks: line number in ``text`` (1-based) -> (cell number, line in cell), both 1-based.
    line_map: dict[int, tuple[int, int]] = field(default_factory=dict)

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    def locate(self, line: int) -> tuple[int | None, int]:
        """(cell, line) for a line of ``text``; cell is None outside notebooks."""
        if not self.notebook:
            return None, line
        return self.line_map.get(line, (None, line))


def decode_python(data: bytes) -> str:
    """Decode as Python does (PEP 263 coding cookie, BOM), refusing binary content."""
    if b"\x00" in data[:8192]:
        raise SourceError("binary file: it contains NUL bytes, so it is not Python source")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        raise SourceError(f"cannot decode: {exc}") from None
    try:
        return data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        line = data[: getattr(exc, "start", 0)].count(b"\n") + 1 if isinstance(exc, UnicodeDecodeError) else None
        raise SourceError(f"not valid {encoding} text ({exc.__class__.__name__}: {exc.reason if hasattr(exc, 'reason') else exc})", line=line) from None


_MAGIC = re.compile(r"^\s*(%|!|\?)|^\s*\w[\w.]*\?\s*$")


def notebook_source(path: str, data: bytes) -> Source:
    """The code cells of an .ipynb joined into one module; IPython magics become blank lines."""
    try:
        doc = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SourceError(f"broken notebook: not valid JSON ({exc})") from None
    cells = doc.get("cells") if isinstance(doc, dict) else None
    if not isinstance(cells, list):
        raise SourceError("broken notebook: no 'cells' list")
    out: list[str] = []
    line_map: dict[int, tuple[int, int]] = {}
    code_cell = 0
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        code_cell += 1
        src = cell.get("source", "")
        if isinstance(src, list):
            src = "".join(s for s in src if isinstance(s, str))
        if not isinstance(src, str):
            continue
        cell_lines = src.splitlines()
        if cell_lines and cell_lines[0].lstrip().startswith("%%"):
            continue  # a cell magic: the whole cell is not Python
        for i, line in enumerate(cell_lines, start=1):
            out.append("" if _MAGIC.match(line) else line)
            line_map[len(out)] = (code_cell, i)
        out.append("")  # keeps a cell's last statement from running into the next cell
    return Source(path=path, text="\n".join(out) + "\n", notebook=True, line_map=line_map)


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
    if path.endswith(".ipynb"):
        return notebook_source(path, data)
    return Source(path=path, text=decode_python(data))
