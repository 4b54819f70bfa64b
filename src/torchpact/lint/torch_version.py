"""Which branches run on a given torch: version tests evaluated the way Python would evaluate them.

Compatibility code picks a branch by the torch version: ``torch.__version__ >= "2.0"`` (``TorchVersion``
compares as a version with strings and tuples), ``version.parse(torch.__version__) < version.parse("2.9")``
(``packaging``, ``pkg_resources.parse_version``, ``LooseVersion``), or the version parsed into a tuple
(``tuple(int(x) for x in torch.__version__.split(".")[:2]) < (2, 9)``, ``map(int, ...)``), directly or
through names bound to any of these (``_TORCH_VER = ...``, ``_USE_JIT = _TORCH_VER < (2, 9)``). Such a
test is evaluated for a torch ``(major, minor)``; a node under a branch whose test is then known to
be false (or an ``else`` whose test is known true) does not run on that torch. A test lint cannot
evaluate (a feature probe, a call of another module) decides nothing.
"""

from __future__ import annotations

import ast
import re
from typing import Iterable

from torchpact.lint.context import FileContext
from torchpact.lint.analysis.following import follows_definitions

_PARSERS = frozenset({
    "packaging.version.parse", "packaging.version.Version", "pkg_resources.parse_version",
    "distutils.version.LooseVersion", "distutils.version.StrictVersion", "looseversion.LooseVersion",
    "torch.torch_version.TorchVersion",
})
_TORCH_VERSION_NAMES = frozenset({"torch.__version__", "torch.version.__version__"})
_DEPTH = 12
_LEADING_DIGITS = re.compile(r"\d+")


class _Unknown:
    pass


UNKNOWN = _Unknown()


class Release(tuple):
    """A parsed version: its release numbers, trailing zeros dropped ((2, 9, 0) == (2, 9))."""

    @classmethod
    def of(cls, value: object) -> "Release | _Unknown":
        if isinstance(value, Release):
            return value
        if isinstance(value, str):
            digits = []
            for part in value.split("+")[0].split("."):
                num = _LEADING_DIGITS.match(part)
                if not num:
                    break
                digits.append(int(num.group()))
                if num.group() != part:
                    break  # ``0a0``, ``0rc1``: the release ends here
            value = tuple(digits)
        if isinstance(value, tuple) and value and all(isinstance(v, int) for v in value):
            while len(value) > 1 and value[-1] == 0:
                value = value[:-1]
            return cls(value)
        return UNKNOWN


class _TorchVersionString(str):
    """``torch.__version__``: a str that compares as a version with strings and tuples."""


def runs_on(node: ast.AST, ctx: FileContext, version: tuple[int, int]) -> bool:
    """Whether ``node`` may run on torch ``version``: no enclosing branch (across function definitions:
    a ``def`` in a dead branch never exists) is excluded there by a version test."""
    child: ast.AST = node
    for anc in ctx.ancestors(node):
        if isinstance(anc, (ast.If, ast.IfExp, ast.While)) and child is not anc.test:
            value = evaluate(anc.test, ctx, version)
            if isinstance(value, bool):
                in_body = child in anc.body if isinstance(anc.body, list) else child is anc.body
                if in_body and not value or not in_body and value and not isinstance(anc, ast.While):
                    return False
        child = anc
    return True


def runs_on_some(node: ast.AST, ctx: FileContext, versions: Iterable[tuple[int, int]]) -> bool:
    return any(runs_on(node, ctx, v) for v in versions)


@follows_definitions(UNKNOWN)
def evaluate(expr: ast.AST, ctx: FileContext, version: tuple[int, int], depth: int = _DEPTH,
             names: frozenset[str] = _TORCH_VERSION_NAMES) -> object:
    """The value of ``expr`` on torch ``version`` where it is made of version tests, else UNKNOWN.

    ``names``: the qualified names that hold the version string (another package's, such as
    ``torchvision.__version__``, a plain ``str`` that compares as a string where torch's compares as a
    version)."""
    if depth <= 0:
        return UNKNOWN
    d = depth - 1
    if isinstance(expr, ast.Constant):
        return expr.value
    if isinstance(expr, (ast.Tuple, ast.List)):
        items = [evaluate(e, ctx, version, d, names) for e in expr.elts]
        return UNKNOWN if any(i is UNKNOWN for i in items) else tuple(items)
    if isinstance(expr, ast.Compare):
        return _compare(expr, ctx, version, d, names)
    if isinstance(expr, ast.BoolOp):
        values = [evaluate(v, ctx, version, d, names) for v in expr.values]
        if isinstance(expr.op, ast.And):
            if any(v is False for v in values):
                return False
            return True if all(v is True for v in values) else UNKNOWN
        if any(v is True for v in values):
            return True
        return False if all(v is False for v in values) else UNKNOWN
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        v = evaluate(expr.operand, ctx, version, d, names)
        return (not v) if isinstance(v, bool) else UNKNOWN
    if isinstance(expr, (ast.Name, ast.Attribute)):
        if ctx.resolve(expr) in names:
            text = f"{version[0]}.{version[1]}.0"
            return _TorchVersionString(text) if names is _TORCH_VERSION_NAMES else text
        if isinstance(expr, ast.Attribute):
            base = evaluate(expr.value, ctx, version, d, names)
            if isinstance(base, Release) and expr.attr in ("release", "major", "minor", "micro"):
                padded = tuple(base) + (0, 0, 0)
                return {"release": base, "major": padded[0], "minor": padded[1], "micro": padded[2]}[expr.attr]
            if isinstance(base, Release) and expr.attr == "base_version":
                return ".".join(map(str, base))
            if base is not UNKNOWN:
                return UNKNOWN
        values = [v for _, v in ctx.bindings(expr)]
        if not values or any(v is None for v in values):
            return UNKNOWN
        found = [evaluate(v, ctx, version, d, names) if isinstance(v, ast.AST) else UNKNOWN for v in values]
        return found[0] if all(f is not UNKNOWN and f == found[0] for f in found) else UNKNOWN
    if isinstance(expr, ast.Subscript):
        base = evaluate(expr.value, ctx, version, d, names)
        index = _slice(expr.slice, ctx, version, d, names)
        if isinstance(base, (str, tuple, list)) and index is not UNKNOWN:
            try:
                out = base[index]  # type: ignore[index,call-overload]
            except (IndexError, TypeError):
                return UNKNOWN
            return tuple(out) if isinstance(out, list) else out
        return UNKNOWN
    if isinstance(expr, ast.Call):
        return _call(expr, ctx, version, d, names)
    return UNKNOWN


def _slice(node: ast.AST, ctx: FileContext, version: tuple[int, int], depth: int, names: frozenset[str]) -> object:
    if isinstance(node, ast.Slice):
        parts = [None if p is None else evaluate(p, ctx, version, depth, names)
                 for p in (node.lower, node.upper, node.step)]
        if any(p is UNKNOWN or (p is not None and not isinstance(p, int)) for p in parts):
            return UNKNOWN
        return slice(*parts)
    value = evaluate(node, ctx, version, depth, names)
    return value if isinstance(value, int) else UNKNOWN


def _call(call: ast.Call, ctx: FileContext, version: tuple[int, int], depth: int, names: frozenset[str]) -> object:
    name = ctx.call_name(call)
    func = call.func
    if name is None and isinstance(func, ast.Name):
        name = func.id
    args = call.args
    if name in _PARSERS and len(args) == 1:
        return Release.of(evaluate(args[0], ctx, version, depth, names))
    if isinstance(func, ast.Attribute) and func.attr in ("split", "partition", "strip") and len(args) <= 1:
        base = evaluate(func.value, ctx, version, depth, names)
        sep = evaluate(args[0], ctx, version, depth, names) if args else None
        if isinstance(base, str) and (sep is None or isinstance(sep, str)):
            return tuple(getattr(str(base), func.attr)(*([sep] if args else [])))
        return UNKNOWN
    if name in ("tuple", "list") and len(args) == 1:
        return _sequence(args[0], ctx, version, depth, names)
    if name == "int" and len(args) == 1:
        v = evaluate(args[0], ctx, version, depth, names)
        return int(v) if isinstance(v, str) and v.isdigit() else UNKNOWN
    return UNKNOWN


def _sequence(expr: ast.AST, ctx: FileContext, version: tuple[int, int], depth: int, names: frozenset[str]) -> object:
    """``tuple(int(x) for x in parts)``, ``tuple(map(int, parts))``, ``tuple(parts)``."""
    if isinstance(expr, (ast.GeneratorExp, ast.ListComp)) and len(expr.generators) == 1:
        gen = expr.generators[0]
        source = evaluate(gen.iter, ctx, version, depth, names)
        if gen.ifs or not isinstance(gen.target, ast.Name) or not isinstance(source, tuple):
            return UNKNOWN
        elt = expr.elt
        if isinstance(elt, ast.Name) and elt.id == gen.target.id:
            return source
        if isinstance(elt, ast.Call) and isinstance(elt.func, ast.Name) and elt.func.id == "int" and \
                len(elt.args) == 1 and isinstance(elt.args[0], ast.Name) and elt.args[0].id == gen.target.id:
            return _ints(source)
        return UNKNOWN
    if (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "map"
            and len(expr.args) == 2 and isinstance(expr.args[0], ast.Name) and expr.args[0].id == "int"):
        return _ints(evaluate(expr.args[1], ctx, version, depth, names))
    value = evaluate(expr, ctx, version, depth, names)
    return tuple(value) if isinstance(value, (tuple, list)) else UNKNOWN


def _ints(items: object) -> object:
    if isinstance(items, tuple) and all(isinstance(i, str) and i.isdigit() for i in items):
        return tuple(int(i) for i in items)
    return UNKNOWN


_OPS = {ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
        ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}


def _compare(expr: ast.Compare, ctx: FileContext, version: tuple[int, int], depth: int,
             names: frozenset[str]) -> object:
    left = evaluate(expr.left, ctx, version, depth, names)
    if left is UNKNOWN:
        return UNKNOWN
    result = True
    for op, right_node in zip(expr.ops, expr.comparators, strict=True):
        right = evaluate(right_node, ctx, version, depth, names)
        fn = _OPS.get(type(op))
        if right is UNKNOWN or fn is None:
            return UNKNOWN
        a, b = left, right
        if isinstance(a, (Release, _TorchVersionString)) or isinstance(b, (Release, _TorchVersionString)):
            a, b = Release.of(a), Release.of(b)  # versions compare as versions
            if a is UNKNOWN or b is UNKNOWN:
                return UNKNOWN
            a, b = tuple(a), tuple(b)  # type: ignore[arg-type]
        elif type(a) is not type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
            return UNKNOWN
        try:
            if not fn(a, b):
                result = False
        except TypeError:
            return UNKNOWN
        left = right
    return result
