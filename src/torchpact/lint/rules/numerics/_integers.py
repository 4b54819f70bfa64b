"""Whether an expression certainly holds whole numbers, for the rounding rules (TP319, TP320).

Rounding in `1 + x` or `exp(x) - 1` only loses information when `x` is a small fraction: a whole
number (an integer dtype, or a float tensor of whole values such as `torch.floor(...)`'s result)
gives an exact `1 + x`, and `exp(x) - 1` cancels only for `|x|` well below 1, which no non-zero
whole number is. Known whole numbers are integer literals and Python ints (`len`, `int`, `.numel()`,
`.size(i)`, `.shape[i]`), integer-dtype tensors (`torch.randint`, `torch.arange` of ints,
`dtype=torch.long`, `.long()`, `.to(torch.int64)`, comparisons), `floor` / `ceil` / `round` /
`trunc` results, and `+ - * // %` of those. Integers also arrive through torch functions that
return indices or counts (`bincount`, `histc`, `nonzero`, `argmax` / `argsort`, `searchsorted`, the
indices of `topk` / `sort` / `max(dim)` / `kthvalue` / `mode` / `median(dim)` — by unpacking, `[1]` or
`.indices` — and the counts and inverse of `unique` / `unique_consecutive` with `return_counts` /
`return_inverse`), and through the returns of this file's own functions when every return is whole.
Anything else may be fractional.
"""

from __future__ import annotations

import ast

from torchpact.lint.context import FileContext, argument, keyword_is_true
from torchpact.lint.dataflow import _Unpacked

_INT_DTYPES = frozenset(f"torch.{t}" for t in (
    "long", "int", "int64", "int32", "int16", "int8", "uint8", "uint16", "uint32", "uint64", "short",
    "bool",
))
_WHOLE_FUNCTIONS = frozenset(f"torch.{f}" for f in (
    "floor", "ceil", "trunc", "fix", "randint", "randperm", "bincount", "argmax", "argmin", "argsort",
    "count_nonzero", "numel", "searchsorted", "bucketize", "sign", "nonzero", "argwhere", "histc",
    "tril_indices", "triu_indices", "randint_like",
))
# Functions and methods returning (values, indices): the indices (element 1, ``.indices``) are int64.
_WITH_INDICES = frozenset({"topk", "sort", "kthvalue", "mode", "max", "min", "median", "nanmedian", "cummax",
                           "cummin"})
_UNIQUE = frozenset({"unique", "unique_consecutive"})
_WHOLE_METHODS = frozenset({
    "long", "int", "short", "byte", "char", "bool", "floor", "ceil", "trunc", "fix", "argmax", "argmin",
    "argsort", "numel", "count_nonzero", "nonzero", "size", "dim", "ndimension", "nelement", "sign",
})
_KEEP_METHODS = frozenset({  # whole numbers in, whole numbers out
    "view", "reshape", "flatten", "squeeze", "unsqueeze", "transpose", "permute", "contiguous", "t",
    "cuda", "cpu", "float", "double", "half", "bfloat16", "sum", "cumsum", "prod", "abs", "neg", "max",
    "min", "amax", "amin", "repeat", "expand", "clone", "detach", "flip", "roll", "expand_as", "view_as",
})
_WHOLE_OPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)


def whole_numbers(expr: ast.AST | None, ctx: FileContext, depth: int = 8) -> bool:
    """Whether ``expr`` certainly holds whole numbers on every path that reaches it (see above)."""
    if expr is None or depth <= 0:
        return False
    d = depth - 1
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, int)
    if isinstance(expr, ast.Name):
        binds = ctx.bindings(expr)
        return bool(binds) and all(_unpacked_whole(expr.id, owner, value, ctx, d) if isinstance(value, _Unpacked)
                                   else _whole_definition(owner, value, ctx, d) for owner, value in binds)
    if isinstance(expr, ast.Attribute) and expr.attr == "indices":
        return _element_whole(expr.value, 1, ctx)
    if isinstance(expr, ast.Compare):
        return True  # a bool, or a bool tensor
    if isinstance(expr, ast.UnaryOp):
        return isinstance(expr.op, (ast.USub, ast.UAdd)) and whole_numbers(expr.operand, ctx, d)
    if isinstance(expr, ast.BinOp):
        return (isinstance(expr.op, _WHOLE_OPS) and whole_numbers(expr.left, ctx, d)
                and whole_numbers(expr.right, ctx, d))
    if isinstance(expr, ast.Subscript):
        value = expr.value
        if isinstance(value, ast.Attribute) and value.attr == "shape":
            return True
        if isinstance(expr.slice, ast.Constant) and isinstance(expr.slice.value, int) and _element_whole(
                value, expr.slice.value, ctx):
            return True  # ``torch.topk(x, k)[1]``
        return whole_numbers(value, ctx, d)
    if isinstance(expr, ast.Call):
        return _whole_call(expr, ctx, d)
    return False


def _unpacked_whole(name: str, owner: ast.AST, value: _Unpacked, ctx: FileContext, depth: int) -> bool:
    """``_, counts = torch.unique_consecutive(x, return_counts=True)``: the element ``name`` unpacks."""
    targets = owner.targets if isinstance(owner, ast.Assign) else [getattr(owner, "target", None)]
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)):
            names = [e.id if isinstance(e, ast.Name) else None for e in target.elts]
            if name in names and not any(isinstance(e, ast.Starred) for e in target.elts):
                return _element_whole(value.value, names.index(name), ctx)
    return False


def _element_whole(call: ast.AST, index: int, ctx: FileContext) -> bool:
    """Whether element ``index`` of what ``call`` returns holds whole numbers: the indices of a
    (values, indices) pair, the inverse / counts of ``unique``."""
    if not isinstance(call, ast.Call):
        return False
    qn = ctx.call_name(call)
    func = call.func
    last = qn.rsplit(".", 1)[-1] if qn and qn.startswith("torch.") else (
        func.attr if qn is None and isinstance(func, ast.Attribute) else None)
    if last in _WITH_INDICES:
        return index == 1
    if last in _UNIQUE:
        flags = [keyword_is_true(call, "return_inverse"), keyword_is_true(call, "return_counts")]
        return 1 <= index <= sum(flags)  # (output, [inverse], [counts]): all but the output are int64
    fn = _local_function(call, ctx) if qn is None or "." not in qn else None
    if fn is None:
        return False
    returns = [n for n in ctx.walk_scope(fn.body) if isinstance(n, ast.Return)]
    return bool(returns) and all(isinstance(r.value, ast.Tuple) and len(r.value.elts) > index
                                 and whole_numbers(r.value.elts[index], ctx) for r in returns)


def _whole_returns(call: ast.Call, ctx: FileContext, depth: int) -> bool:
    """A call of this file's function (``helper(x)``, ``self.helper(x)``) whose every return is whole."""
    fn = _local_function(call, ctx)
    if fn is None:
        return False
    key = ("whole_returns", id(fn))
    if key in ctx.memo:
        return ctx.memo[key]  # type: ignore[return-value]
    ctx.memo[key] = False  # while in progress: a recursive helper proves nothing
    returns = [n for n in ctx.walk_scope(fn.body) if isinstance(n, ast.Return)]
    found = bool(returns) and all(r.value is not None and whole_numbers(r.value, ctx, depth) for r in returns)
    ctx.memo[key] = found
    return found


def _local_function(call: ast.Call, ctx: FileContext) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    func = call.func
    name = func.id if isinstance(func, ast.Name) else (
        func.attr if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
        and func.value.id in ("self", "cls") else None)
    defs = ctx.functions.get(name or "", [])
    return defs[0] if len(defs) == 1 else None


def _whole_definition(owner: ast.AST, value: ast.AST | None, ctx: FileContext, depth: int) -> bool:
    annotation = getattr(owner, "annotation", None)
    if isinstance(annotation, ast.Name) and annotation.id == "int":
        return True  # ``n: int``
    return value is not None and whole_numbers(value, ctx, depth)


def _whole_call(call: ast.Call, ctx: FileContext, depth: int) -> bool:
    dtype = argument(call, "dtype")
    if dtype is not None and ctx.resolve(dtype) in _INT_DTYPES:
        return True
    qn = ctx.call_name(call)
    if qn is not None:
        if qn in ("builtins.len", "builtins.int"):
            return True
        if qn == "torch.round":
            return argument(call, "decimals") is None
        if qn in _WHOLE_FUNCTIONS:
            return True
        if qn == "torch.arange":  # start + i * step: whole when start and step are, whatever the end
            if len(call.args) == 1 and not call.keywords:
                return True
            start, step = argument(call, "start", 0), argument(call, "step", 2)
            return all(v is None or whole_numbers(v, ctx, depth) for v in (start, step))
        if qn in ("torch.tensor", "torch.as_tensor"):
            return whole_numbers(argument(call, "data", 0), ctx, depth)
        if qn in ("torch.clamp", "torch.clip"):
            return _clamped_whole(call, argument(call, "input", 0), 1, ctx, depth)
        return False
    if _whole_returns(call, ctx, depth):
        return True
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in ("len", "int", "round") and not (func.id == "round" and len(call.args) > 1)
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr in _WHOLE_METHODS:
        return True
    if func.attr == "round":
        return not call.args and argument(call, "decimals") is None
    if func.attr in ("to", "type"):
        target = call.args[0] if call.args else None
        if target is not None and ctx.resolve(target) in _INT_DTYPES:
            return True
    if func.attr in ("clamp", "clip"):
        return _clamped_whole(call, func.value, 0, ctx, depth)
    return func.attr in _KEEP_METHODS and whole_numbers(func.value, ctx, depth)


def _clamped_whole(call: ast.Call, tensor: ast.AST | None, first: int, ctx: FileContext, depth: int) -> bool:
    bounds = [argument(call, "min", first), argument(call, "max", first + 1)]
    return whole_numbers(tensor, ctx, depth) and all(b is None or whole_numbers(b, ctx, depth) for b in bounds)
