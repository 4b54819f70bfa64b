"""Which sizes lie past the branch a ``TracerWarning`` names, read from the model's frame.

When torch warns while tracing (``Converting a tensor to a Python boolean might cause the trace to be
incorrect``), the model's frame is live: its line is parsed, and each comparison on it is evaluated
side by side in that frame, with tracing paused so that nothing is recorded into the trace. A side
that is an integer 0-dim tensor (a size read while tracing) equal to the example's size of one of
the inferred dims, compared with a plain number ``k``, names both sides of the branch: the sizes
next to ``k`` where the comparison flips. Those sizes become variants the trace must also match on.
A condition that cannot be read (a value, not a size; a call) names no size.
"""

from __future__ import annotations

import ast
import contextlib
import io
import linecache
import math
import sys
import tokenize
import warnings
from typing import Any, Iterator

from torchpact.audit.variants import Dims
from torchpact.userframes import is_user_file

_SAFE = (ast.Expression, ast.Name, ast.Attribute, ast.Constant, ast.Subscript, ast.Load, ast.BinOp, ast.UnaryOp,
         ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Div, ast.Mod, ast.USub, ast.Tuple, ast.Slice)
_CALLS = {"len", "int", "float", "min", "max", "abs"}
_METHODS = {"size", "dim"}
# comparison -> the sizes next to k where ``size <op> k`` flips
_FLIPS = {ast.Gt: (0, 1), ast.LtE: (0, 1), ast.Lt: (-1, 0), ast.GtE: (-1, 0), ast.Eq: (-1, 0, 1),
          ast.NotEq: (-1, 0, 1)}
_MIRROR = {ast.Gt: ast.Lt, ast.Lt: ast.Gt, ast.GtE: ast.LtE, ast.LtE: ast.GtE, ast.Eq: ast.Eq, ast.NotEq: ast.NotEq}


def _code(text: str) -> str:
    """The line without its comment."""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                return text[:tok.start[1]]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return text


def _statement(text: str) -> ast.AST | None:
    text = _code(text.strip()).strip()
    for candidate in (text, text + " pass", text.rstrip(":").replace("elif ", "if ", 1) + ": pass"):
        try:
            return ast.parse(candidate)
        except SyntaxError:
            continue
    return None


def _safe(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            ok = ((isinstance(n.func, ast.Name) and n.func.id in _CALLS)
                  or (isinstance(n.func, ast.Attribute) and n.func.attr in _METHODS))
            if not ok or n.keywords:
                return False
        elif not isinstance(n, _SAFE) and not isinstance(n, (ast.operator, ast.unaryop, ast.expr_context)):
            return False
    return True


def _value(node: ast.AST, frame: Any) -> Any:
    if not _safe(node):
        raise ValueError("not a plain expression")
    code = compile(ast.Expression(body=node), "<condition>", "eval")
    return eval(code, dict(frame.f_globals), dict(frame.f_locals))  # noqa: S307 (names and attributes only)


def _size(x: Any) -> int | None:
    import torch

    if isinstance(x, torch.Tensor) and x.dim() == 0 and not x.dtype.is_floating_point and x.dtype is not torch.bool:
        return int(x)
    return None


def _number(x: Any) -> float | None:
    import torch

    if isinstance(x, bool) or isinstance(x, torch.Tensor):
        return None
    return float(x) if isinstance(x, (int, float)) else None


def read(frame: Any, dims: Dims) -> list[dict[str, Any]]:
    """The size comparisons on the frame's current line: ``{"path", "line", "dim", "sizes", "text"}`` each."""
    import torch

    path, line = frame.f_code.co_filename, frame.f_lineno
    tree = _statement(linecache.getline(path, line))
    if tree is None:
        return []
    out = []
    state = torch._C._get_tracing_state()
    torch._C._set_tracing_state(None)  # evaluating the sides must not record anything into the trace
    try:
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _FLIPS):
                continue
            left, right, op = node.left, node.comparators[0], type(node.ops[0])
            try:
                a, b = _value(left, frame), _value(right, frame)
            except Exception:
                continue
            for size_side, k_side, o, size_node in ((a, b, op, left), (b, a, _MIRROR[op], right)):
                size, k = _size(size_side), _number(k_side)
                if size is None or k is None:
                    continue
                for name, (example, _) in dims.dims.items():
                    if example != size:
                        continue
                    base = math.floor(k) if o in (ast.Gt, ast.LtE) else math.ceil(k)
                    sizes = sorted({base + d for d in _FLIPS[o]} - {size})
                    out.append({"path": path, "line": line, "dim": name, "sizes": [s for s in sizes if s >= 1],
                                "text": f"{ast.unparse(node)} ({ast.unparse(size_node)} is {size}, the other "
                                        f"side {k:g})"})
    finally:
        torch._C._set_tracing_state(state)
    return out


@contextlib.contextmanager
def reading(dims: Dims, into: list[dict[str, Any]]) -> Iterator[None]:
    """Inside the block, each ``TracerWarning`` reads the size comparisons on the model line that
    caused it into ``into``; the warning then goes on to whoever shows warnings."""
    import torch

    outer = warnings.showwarning

    def show(message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        if issubclass(category, torch.jit.TracerWarning):
            frame = sys._getframe(1)
            while frame is not None and not is_user_file(frame.f_code.co_filename):
                frame = frame.f_back
            if frame is not None:
                try:
                    into.extend(c for c in read(frame, dims) if c not in into)
                except Exception:
                    pass  # reading the condition is a bonus; the warning itself is still recorded
        outer(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = outer
