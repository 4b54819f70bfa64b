"""IPython syntax in a notebook cell turned into Python, every line and column where the user sees it.

IPython's own ``TransformerManager`` rewrites ``files = !ls`` into ``files =
get_ipython().getoutput('ls')``: right for running, but it moves columns, and lint must work where
IPython is not installed. So this module handles each IPython form itself and replaces it by a
placeholder of *the same length* (``...`` padded with spaces): every other character keeps its offset,
findings keep their line and column, and autofix edits map back onto the cell unchanged.

Forms (as IPython 8 reads them; each one is a syntax error in plain Python, so valid code is never
touched): ``!cmd`` / ``!!cmd``, ``%magic args``, ``x = !cmd`` / ``x = %magic``, ``?obj`` / ``obj?`` /
``obj??``, the autocall prefixes ``/f a`` ``,f a`` ``;f a``, a ``\\``-continued escape, line magics
without ``%`` (automagic: ``pip install x``), pasted ``>>>`` / ``In [1]:`` prompts, and cell magics
(``%%bash``: the body is not Python and is skipped; ``%%time`` / ``%%capture`` ...: the body is Python
and is linted, as ruff does).
``%time stmt`` / ``%timeit stmt`` / ``%prun stmt`` keep ``stmt`` visible to lint: their prefix becomes
``0    ;``. A cell whose first line is indented is read as IPython dedents it, under an ``if True:``
line that ``prefix`` records.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass, field

# Cell magics whose body is Python run in the user's namespace (ruff's list): lint the body.
PYTHON_CELL_MAGICS = frozenset({"capture", "debug", "prun", "pypy", "python", "python3", "time", "timeit"})
# Line magics whose argument is a Python statement.
PYTHON_LINE_MAGICS = frozenset({"time", "timeit", "prun"})
# Line magics IPython runs without the ``%`` (automagic); tried only on a line Python cannot parse.
AUTOMAGICS = frozenset({
    "alias", "autoreload", "bookmark", "cat", "cd", "clear", "conda", "config", "cp", "debug", "dhist",
    "dirs", "env", "history", "less", "load", "load_ext", "ls", "lsmagic", "magic", "mamba", "man",
    "matplotlib", "micromamba", "mkdir", "mv", "pdb", "pinfo", "pip", "popd", "prun", "pushd", "pwd",
    "reload_ext", "rerun", "reset", "rm", "rmdir", "run", "save", "store", "sx", "system", "time",
    "timeit", "who", "whos", "xmode",
})
ESCAPES = "!%?/,;"
HEADER = "if True:\n"

_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")
_ASSIGN = re.compile(r"[\w\s.,*\[\]()'\"]*?(?<![=<>!])=\s*(?=[!%](?!=))")
_MAGIC = re.compile(r"%(\w+)")
_AUTOMAGIC = re.compile(r"(\w+)(\s+\S|\s*$)")
_CLASSIC_PROMPT = re.compile(r"(>>>|\.\.\.)(?: |(?=[\r\n])|$)")
_IPYTHON_PROMPT = re.compile(r"(?:In \[\d+\]: |[ \t]*\.\.\.+: ?)")


@dataclass
class CellCode:
    """One code cell as Python: ``text`` has the cell's length and lines, IPython forms replaced.

    ``opaque`` holds the [start, end) offsets (in the cell's own text) that were replaced, so an
    autofix never edits them; ``error`` is set when the cell is not valid Python even so.
    """

    text: str
    prefix: str = ""
    opaque: list[tuple[int, int]] = field(default_factory=list)
    error: SyntaxError | None = None


def split_lines(text: str) -> list[str]:
    """Lines with their endings, split where Python splits them (not at form feeds or U+2028)."""
    return _LINES.findall(text)


def _placeholder(length: int) -> str:
    return ("..." if length >= 3 else "0").ljust(length)


def transform_cell(source: str) -> CellCode:
    """The cell as Python of the same shape; see the module docstring for the forms handled."""
    if _parses(source):
        return CellCode(text=source)  # every IPython form is a syntax error: valid Python has none
    lines = split_lines(source)
    first = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if first is None:
        return CellCode(text=source)
    pinned = _blank_prompts(lines, first)
    head = lines[first].strip()
    if head.startswith("%%"):
        name = _MAGIC.match(head[1:])
        offset = sum(len(ln) for ln in lines[:first])
        end = offset + len(lines[first].rstrip("\r\n"))
        if name is None or name.group(1) not in PYTHON_CELL_MAGICS:
            blank = "".join(_blank(ln) for ln in lines)
            return CellCode(text=blank, opaque=[(0, len(source))])
        lines[first] = _blank(lines[first])
        pinned.append((offset, end))
    code = next((ln for ln in lines if ln.strip()), "")
    indented = code[:1] in (" ", "\t", "\f")
    prefix = HEADER if indented else ""
    statement_as_code: set[int] = set(range(len(lines)))
    automagic: set[int] = set()
    for _ in range(len(lines) + 1):
        text, opaque = _rewrite(lines, statement_as_code, automagic)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the engine parses the notebook again and may warn then
                ast.parse(prefix + text)
        except SyntaxError as exc:
            row = (exc.lineno or 1) - 1 - prefix.count("\n")
            if row in statement_as_code and _magic_with_statement(lines[row]):
                statement_as_code.discard(row)  # `%time for ...: ...` cannot follow `0;`: keep it opaque
                continue
            if 0 <= row < len(lines) and row not in automagic and _automagic(lines[row]):
                automagic.add(row)
                continue
            exc.lineno = max(1, row + 1)
            return CellCode(text=text, prefix=prefix, opaque=pinned + opaque, error=exc)
        except (ValueError, RecursionError, MemoryError) as exc:
            err = SyntaxError(f"cannot parse: {exc.__class__.__name__}: {exc}")
            err.lineno, err.offset = 1, None
            return CellCode(text=text, prefix=prefix, opaque=pinned + opaque, error=err)
        return CellCode(text=text, prefix=prefix, opaque=pinned + opaque)
    raise AssertionError("unreachable: each retry removes a line from a finite set")


def _parses(text: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _blank_prompts(lines: list[str], first: int) -> list[tuple[int, int]]:
    """Pasted ``>>> `` / ``... `` or ``In [1]: `` / ``   ...: `` prompts become spaces, when the cell's
    first line has one (as IPython strips them); the cell is then read as an indented one."""
    for initial, prompt in ((">>>", _CLASSIC_PROMPT), ("In [", _IPYTHON_PROMPT)):
        if lines[first].startswith(initial) and prompt.match(lines[first]):
            break
    else:
        return []
    spans, pos = [], 0
    for i, line in enumerate(lines):
        m = prompt.match(line)
        if m and m.end() > 0:
            lines[i] = " " * m.end() + line[m.end():]
            spans.append((pos, pos + m.end()))
        pos += len(line)
    return spans


def _blank(line: str) -> str:
    body = line.rstrip("\r\n")
    return " " * len(body) + line[len(body):]


def _magic_with_statement(line: str) -> int | None:
    """Where the statement of ``%time stmt`` starts in ``line``, or None for another line."""
    body = line.rstrip("\r\n")
    rest = body.lstrip(" \t\f")
    m = _MAGIC.match(rest)
    if not m or m.group(1) not in PYTHON_LINE_MAGICS:
        return None
    arg = rest[m.end():]
    stmt = arg.lstrip()
    if not stmt or stmt.startswith("-") or arg == stmt:
        return None  # options (`%timeit -n 10 f()`) or nothing: the whole line stays opaque
    return len(body) - len(stmt)


def _automagic(line: str) -> bool:
    m = _AUTOMAGIC.match(line.lstrip(" \t\f"))
    return bool(m and m.group(1) in AUTOMAGICS)


def _rewrite(lines: list[str], statement_as_code: set[int], automagic: set[int]) -> tuple[str, list[tuple[int, int]]]:
    """One pass over the lines: IPython forms at the start of a logical line become placeholders."""
    out: list[str] = []
    opaque: list[tuple[int, int]] = []
    depth, quote, continued, escaped = 0, "", False, False
    first_row = first_pos = 0  # where the current logical line starts
    pos = 0
    for row, line in enumerate(lines):
        body = line.rstrip("\r\n")
        end = line[len(body):]
        if escaped:  # a `\`-continued escape command goes on: not Python either
            out.append(_blank(line))
            opaque.append((pos, pos + len(body)))
            escaped = body.endswith("\\")
            pos += len(line)
            continue
        if depth == 0 and not quote and not continued:
            first_row, first_pos = row, pos
            cut = _escape_start(body, row, statement_as_code, automagic)
            if cut is not None:
                start, code_at = cut
                if code_at is None:
                    out.append(body[:start] + _placeholder(len(body) - start) + end)
                    opaque.append((pos + start, pos + len(body)))
                    escaped = body.endswith("\\")
                    pos += len(line)
                    continue
                # `%time stmt`: the prefix goes, the statement stays
                body = body[:start] + "0".ljust(code_at - start - 1) + ";" + body[code_at:]
                opaque.append((pos + start, pos + code_at))
        depth, quote, continued, code_end = _scan(body, depth, quote)
        out.append(body + end)
        if depth == 0 and not quote and not continued and body[:code_end].rstrip().endswith("?"):
            # `obj?` / `obj??` (IPython's help): the whole logical line is help, not code
            head = out[first_row]
            indent = len(head) - len(head.lstrip(" \t\f"))
            size = len(head.rstrip("\r\n"))
            out[first_row] = head[:indent] + _placeholder(size - indent) + head[size:]
            out[first_row + 1:] = [_blank(x) for x in out[first_row + 1:]]
            opaque.append((first_pos + indent, pos + len(body)))
        pos += len(line)
    return "".join(out), opaque


def _escape_start(body: str, row: int, statement_as_code: set[int],
                  automagic: set[int]) -> tuple[int, int | None] | None:
    """(where the IPython form starts, where a kept statement starts) for a logical line, else None."""
    indent = len(body) - len(body.lstrip(" \t\f"))
    rest = body[indent:]
    if not rest:
        return None
    if rest[0] in ESCAPES:
        code_at = _magic_with_statement(body) if row in statement_as_code else None
        return indent, code_at
    m = _ASSIGN.match(rest)
    if m:
        return indent + m.end(), None
    if row in automagic:
        return indent, None
    return None


def _scan(body: str, depth: int, quote: str) -> tuple[int, str, bool, int]:
    """Bracket depth and open string after one physical line; also whether it ends in a ``\\``
    continuation and where its comment starts. Enough of Python's tokenizer to find logical lines."""
    i, n = 0, len(body)
    comment = n
    continued = False
    while i < n:
        c = body[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if body.startswith(quote, i):
                i += len(quote)
                quote = ""
                continue
            i += 1
            continue
        if c == "#":
            comment = i
            break
        if c in "\"'":
            quote = body[i:i + 3] if body[i:i + 3] in ('"""', "'''") else c
            i += len(quote)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        elif c == "\\" and i == n - 1:
            continued = True
        i += 1
    if quote in ('"', "'"):
        if body.endswith("\\"):
            continued = True
        else:
            quote = ""  # a one-quote string cannot span lines: Python reports it, we just move on
    return depth, quote, continued, comment
