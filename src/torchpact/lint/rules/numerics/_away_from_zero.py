"""Whether a value is 0 or at least 1, so `1 + x` cannot round it away (TP319).

`1 + x` loses information only when `x` can be a nonzero value below about the float's epsilon. A
value that is either exactly 0 or at least 1 never is. Known such values: whole numbers (see
`_integers.py`), constants >= 1, `1 + t` (or `t + c`, c >= 1) for any non-negative `t`, `exp(t)` where
`t` is non-negative or masked to `-inf` (each entry 0 or >= 1), a `clamp(min=c)` with c >= 1, and sums
and products of such values (`+`, `*`, `sum`). Non-negative: constants >= 0, `exp`, `softplus`,
`sigmoid`, `relu`, `abs`, squares, `clamp(min=c)` with c >= 0, sums and products of those. A name
counts as masked when the function sets its negative entries to `-inf` (or 0) before the read:
`t[t < 0] = -inf`, `t = t.masked_fill(t < 0, -inf)`, `t = torch.where(t < 0, -inf, t)`.
"""

from __future__ import annotations

import ast

from torchpact.lint.context import FileContext, argument
from torchpact.lint.rules.numerics._integers import changed_in_place, whole_numbers
from torchpact.lint.analysis.following import follows_definitions

_NON_NEGATIVE = frozenset({"exp", "softplus", "sigmoid", "relu", "abs", "square", "relu6", "elu1"})
_SUMS = frozenset({"sum", "cumsum", "nansum"})
_DEPTH = 10


@follows_definitions(False)
def zero_or_at_least_one(expr: ast.AST | None, ctx: FileContext, depth: int = _DEPTH) -> bool:
    """Whether every entry of ``expr`` is exactly 0 or at least 1 (see above)."""
    if expr is None or depth <= 0:
        return False
    d = depth - 1
    if whole_numbers(expr, ctx):
        return True
    if isinstance(expr, ast.Constant):
        return type(expr.value) in (int, float) and (expr.value == 0 or expr.value >= 1)
    if isinstance(expr, ast.Name):
        values = [v for _, v in ctx.bindings(expr)]
        return bool(values) and all(v is not None and zero_or_at_least_one(v, ctx, d) for v in values) \
            and not changed_in_place(expr, ctx, d)
    if isinstance(expr, ast.BinOp):
        if isinstance(expr.op, ast.Add):
            if _at_least(expr.left, 1) and non_negative(expr.right, ctx, d):
                return True
            if _at_least(expr.right, 1) and non_negative(expr.left, ctx, d):
                return True
        if isinstance(expr.op, (ast.Add, ast.Mult)):
            return zero_or_at_least_one(expr.left, ctx, d) and zero_or_at_least_one(expr.right, ctx, d)
        return False
    if isinstance(expr, ast.Call):
        name, receiver = _callee(expr, ctx)
        if name == "exp":
            return _non_negative_or_masked(receiver, ctx, d)
        if name in _SUMS:
            return zero_or_at_least_one(receiver, ctx, d)
        if name in ("clamp", "clip", "clamp_min"):
            return _at_least(_low(expr, ctx), 1)
    return False


@follows_definitions(False)
def non_negative(expr: ast.AST | None, ctx: FileContext, depth: int = _DEPTH) -> bool:
    """Whether every entry of ``expr`` is >= 0 (see above)."""
    if expr is None or depth <= 0:
        return False
    d = depth - 1
    if isinstance(expr, ast.Constant):
        return type(expr.value) in (int, float) and expr.value >= 0
    if isinstance(expr, ast.Name):
        values = [v for _, v in ctx.bindings(expr)]
        return bool(values) and all(v is not None and non_negative(v, ctx, d) for v in values)
    if isinstance(expr, ast.BinOp):
        if isinstance(expr.op, ast.Pow) and isinstance(expr.right, ast.Constant) and expr.right.value == 2:
            return True
        if isinstance(expr.op, (ast.Add, ast.Mult)):
            return non_negative(expr.left, ctx, d) and non_negative(expr.right, ctx, d)
        return False
    if isinstance(expr, ast.Call):
        name, receiver = _callee(expr, ctx)
        if name in _NON_NEGATIVE:
            return True
        if name in _SUMS:
            return non_negative(receiver, ctx, d)
        if name in ("clamp", "clip", "clamp_min"):
            return _at_least(_low(expr, ctx), 0)
    return False


def _callee(call: ast.Call, ctx: FileContext) -> tuple[str | None, ast.AST | None]:
    """(the torch function or tensor method's name, the tensor it works on)."""
    name, receiver, _ = _call_parts(call, ctx)
    return name, receiver


def _call_parts(call: ast.Call, ctx: FileContext) -> tuple[str | None, ast.AST | None, list[ast.expr]]:
    """(name, the tensor, the other positional arguments): ``torch.f(t, a)`` and ``t.f(a)`` alike."""
    qn = ctx.call_name(call)
    if qn is not None:
        if qn.startswith("torch.") and call.args:
            return qn.rsplit(".", 1)[-1], call.args[0], list(call.args[1:])
        return None, None, []
    if isinstance(call.func, ast.Attribute):
        return call.func.attr, call.func.value, list(call.args)
    return None, None, []


def _low(call: ast.Call, ctx: FileContext) -> ast.AST | None:
    """The ``min`` bound of a clamp, positional or keyword."""
    _, _, rest = _call_parts(call, ctx)
    return argument(call, "min") or (rest[0] if rest else None)


def _at_least(expr: ast.AST | None, bound: float) -> bool:
    return isinstance(expr, ast.Constant) and type(expr.value) in (int, float) and expr.value >= bound


@follows_definitions(False)
def _non_negative_or_masked(expr: ast.AST | None, ctx: FileContext, depth: int) -> bool:
    if non_negative(expr, ctx, depth):
        return True
    if isinstance(expr, ast.Call):
        name, receiver, rest = _call_parts(expr, ctx)
        if name == "masked_fill" and len(rest) == 2:
            return _negatives_of(rest[0], receiver) and _minus_inf_or_zero(rest[1])
        if name == "where" and ctx.call_name(expr) == "torch.where" and len(expr.args) == 3:
            cond, yes, no = expr.args
            return (_negatives_of(cond, no) and _minus_inf_or_zero(yes)) or (
                _non_negatives_of(cond, yes) and _minus_inf_or_zero(no))
    if isinstance(expr, ast.Name):
        values = [v for _, v in ctx.bindings(expr)]
        if values and all(v is not None and _non_negative_or_masked(v, ctx, depth - 1) for v in values):
            return True
        return _masked_in_place(expr, ctx)
    return False


def _masked_in_place(name: ast.Name, ctx: FileContext) -> bool:
    """``t[t < 0] = -inf`` in the same function, before the read."""
    scope = ctx.scope(name)
    for node in ctx.walk_scope(scope.body if hasattr(scope, "body") else []):  # type: ignore[attr-defined]
        if isinstance(node, ast.Assign) and node.lineno < name.lineno and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) \
                    and target.value.id == name.id and _negatives_of(target.slice, target.value) \
                    and _minus_inf_or_zero(node.value):
                return True
    return False


def _same(a: ast.AST | None, b: ast.AST | None) -> bool:
    return a is not None and b is not None and ast.dump(a) == ast.dump(b)


def _negatives_of(cond: ast.AST | None, tensor: ast.AST | None) -> bool:
    """``t < 0`` / ``t <= 0`` / ``0 > t``: the condition picks the negative entries of ``tensor``."""
    if not (isinstance(cond, ast.Compare) and len(cond.ops) == 1):
        return False
    left, op, right = cond.left, cond.ops[0], cond.comparators[0]
    if _same(left, tensor) and isinstance(op, (ast.Lt, ast.LtE)) and _at_least(right, 0) and right.value == 0:  # type: ignore[union-attr]
        return True
    return _same(right, tensor) and isinstance(op, (ast.Gt, ast.GtE)) and _at_least(left, 0) and left.value == 0  # type: ignore[union-attr]


def _non_negatives_of(cond: ast.AST | None, tensor: ast.AST | None) -> bool:
    """``t >= 0`` / ``t > 0``: the condition keeps the non-negative entries of ``tensor``."""
    if not (isinstance(cond, ast.Compare) and len(cond.ops) == 1):
        return False
    left, op, right = cond.left, cond.ops[0], cond.comparators[0]
    return _same(left, tensor) and isinstance(op, (ast.Gt, ast.GtE)) and _at_least(right, 0) and right.value == 0  # type: ignore[union-attr]


def _minus_inf_or_zero(expr: ast.AST | None) -> bool:
    if isinstance(expr, ast.Constant):
        return expr.value == 0 or expr.value == float("-inf")
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        inner = expr.operand
        if isinstance(inner, ast.Attribute) and inner.attr == "inf":
            return True  # -math.inf, -torch.inf, -np.inf
        if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and inner.func.id == "float":
            return (bool(inner.args) and isinstance(inner.args[0], ast.Constant)
                    and str(inner.args[0].value).lower() in ("inf", "infinity"))
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "float":
        return (bool(expr.args) and isinstance(expr.args[0], ast.Constant)
                and str(expr.args[0].value).lower() in ("-inf", "-infinity"))
    return False
