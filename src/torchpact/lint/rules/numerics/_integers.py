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

Whole values stay whole, whatever the dtype holds them: `torch.arange` of whole start and step with
any `dtype=`, `.to(torch.float32)` / `.float()` / `.type(...)` of whole values (every float that
rounds an integer is an integer), `torch.abs` / `neg`, and `torch.stack` / `cat` / `meshgrid` (or a
function of the project that returns `torch.meshgrid(...)`, such as a `ndgrid` helper: the project
fact `returns_grid`) of whole tensors, then `permute` / `reshape` / `flatten` / indexing of those, and
einops' `rearrange` / `repeat` (which only move or copy entries) and its `reduce` by `sum` / `max` /
`min` / `prod` (not `mean`). A
true division, a float factor, or an in-place change of the name (or of a part of it, `x[:, 0] /= n`)
that can run before the read ends it.
Anything else may be fractional.
"""

from __future__ import annotations

import ast

from torchpact.lint.context import FileContext, argument, keyword_is_true
from torchpact.lint.dataflow import _Unpacked
from torchpact.lint.project import RETURNS_GRID
from torchpact.lint.analysis.following import follows_definitions

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
    "to", "type", "view", "reshape", "flatten", "squeeze", "unsqueeze", "transpose", "permute", "contiguous", "t",
    "cuda", "cpu", "float", "double", "half", "bfloat16", "sum", "cumsum", "prod", "abs", "neg", "max",
    "min", "amax", "amin", "repeat", "expand", "clone", "detach", "flip", "roll", "expand_as", "view_as",
})
_WHOLE_OPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)
# torch functions whose result is whole when their tensor argument is.
_KEEP_FUNCTIONS = frozenset(f"torch.{f}" for f in ("abs", "neg", "negative", "flatten", "reshape", "permute",
                                                   "squeeze", "unsqueeze", "transpose", "t", "flip", "clone"))
# torch functions joining a sequence of tensors: whole when every tensor is.
_JOINS = frozenset(f"torch.{f}" for f in ("stack", "cat", "concat", "concatenate", "hstack", "vstack", "dstack",
                                          "column_stack"))
# einops functions that only move or copy entries (``rearrange(pos, "n -> n 1")``), and ``reduce``'s
# reductions that keep whole numbers whole (a mean does not).
_EINOPS_MOVES = frozenset({"einops.rearrange", "einops.repeat"})
_WHOLE_REDUCTIONS = frozenset({"sum", "max", "min", "prod", "any", "all"})
# Methods that change a tensor in place; those keeping whole numbers whole are harmless.
_INPLACE_KEEPS = frozenset({"add_", "sub_", "mul_", "neg_", "abs_", "floor_", "ceil_", "round_", "trunc_",
                            "clamp_", "zero_", "fill_", "copy_", "requires_grad_", "share_memory_"})


@follows_definitions(False)
def whole_numbers(expr: ast.AST | None, ctx: FileContext, depth: int = 24) -> bool:
    """Whether ``expr`` certainly holds whole numbers on every path that reaches it (see above)."""
    if expr is None or depth <= 0:
        return False
    d = depth - 1
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, int)
    if isinstance(expr, ast.Name):
        binds = ctx.bindings(expr)
        return bool(binds) and all(_unpacked_whole(expr.id, owner, value, ctx, d) if isinstance(value, _Unpacked)
                                   else _whole_definition(owner, value, ctx, d) for owner, value in binds) \
            and not changed_in_place(expr, ctx, d)
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


def keyword_value(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _int_annotation(annotation: ast.AST | None) -> bool:
    """``int``, or a tuple / list / sequence of ints (``Tuple[int, int]``, ``tuple[int, ...]``)."""
    if isinstance(annotation, ast.Name):
        return annotation.id == "int"
    if isinstance(annotation, ast.Subscript):
        container = annotation.value
        name = container.attr if isinstance(container, ast.Attribute) else getattr(container, "id", "")
        if name not in ("Tuple", "tuple", "List", "list", "Sequence"):
            return False
        items = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        return all(_int_annotation(i) or (isinstance(i, ast.Constant) and i.value is Ellipsis) for i in items)
    return False


def _whole_definition(owner: ast.AST, value: ast.AST | None, ctx: FileContext, depth: int) -> bool:
    annotation = getattr(owner, "annotation", None)
    if _int_annotation(annotation):
        return True  # ``n: int``, ``size: Tuple[int, int]``
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
            if len(call.args) <= 1:  # ``arange(end, ...)``: start 0 unless given by keyword
                start, step = keyword_value(call, "start"), keyword_value(call, "step")
            else:
                start, step = argument(call, "start", 0), argument(call, "step", 2)
            return all(v is None or whole_numbers(v, ctx, depth) for v in (start, step))
        if qn in ("torch.tensor", "torch.as_tensor"):
            return whole_numbers(argument(call, "data", 0), ctx, depth)
        if qn in ("torch.clamp", "torch.clip"):
            return _clamped_whole(call, argument(call, "input", 0), 1, ctx, depth)
        if qn in _KEEP_FUNCTIONS:
            return whole_numbers(argument(call, "input", 0), ctx, depth)
        if qn in _JOINS:
            return whole_sequence(argument(call, "tensors", 0), ctx, depth)
        if qn in _EINOPS_MOVES or qn == "einops.reduce" and _whole_reduction(call):
            return whole_numbers(argument(call, "tensor", 0), ctx, depth)
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


def _whole_reduction(call: ast.Call) -> bool:
    how = argument(call, "reduction", 2)
    return isinstance(how, ast.Constant) and how.value in _WHOLE_REDUCTIONS


def _clamped_whole(call: ast.Call, tensor: ast.AST | None, first: int, ctx: FileContext, depth: int) -> bool:
    bounds = [argument(call, "min", first), argument(call, "max", first + 1)]
    return whole_numbers(tensor, ctx, depth) and all(b is None or whole_numbers(b, ctx, depth) for b in bounds)


@follows_definitions(False)
def whole_sequence(expr: ast.AST | None, ctx: FileContext, depth: int = 24) -> bool:
    """A sequence of tensors that all hold whole numbers: a list / tuple of them, ``torch.meshgrid``
    of them, or a project function that returns ``torch.meshgrid(...)`` given them."""
    if expr is None or depth <= 0:
        return False
    d = depth - 1
    if isinstance(expr, (ast.List, ast.Tuple)):
        return bool(expr.elts) and all(
            whole_sequence(e.value, ctx, d) if isinstance(e, ast.Starred) else whole_numbers(e, ctx, d)
            for e in expr.elts)
    if isinstance(expr, ast.Name):
        values = [v for _, v in ctx.bindings(expr)]
        return bool(values) and all(v is not None and not isinstance(v, _Unpacked) and whole_sequence(v, ctx, d)
                                    for v in values)
    if isinstance(expr, ast.Call):
        qn = ctx.call_name(expr)
        grid = qn == "torch.meshgrid" or not (qn or "").startswith("torch.") and _returns_grid(expr, ctx)
        if grid:
            if len(expr.args) == 1 and isinstance(expr.args[0], (ast.List, ast.Tuple, ast.Name)):
                return whole_sequence(expr.args[0], ctx, d)
            return bool(expr.args) and all(
                whole_sequence(a.value, ctx, d) if isinstance(a, ast.Starred) else whole_numbers(a, ctx, d)
                for a in expr.args)
    return False


def _returns_grid(call: ast.Call, ctx: FileContext) -> bool:
    """A function of this file, or of another linted module (the project fact), whose every return is
    ``torch.meshgrid(...)``."""
    fn = _local_function(call, ctx)
    if fn is not None:
        returns = [n for n in ctx.walk_scope(fn.body) if isinstance(n, ast.Return)]
        return bool(returns) and all(isinstance(r.value, ast.Call) and ctx.call_name(r.value) == "torch.meshgrid"
                                     for r in returns)
    return ctx.calls_project_function_that(call, RETURNS_GRID)


def changed_in_place(name: ast.Name, ctx: FileContext, depth: int) -> bool:
    """Whether the tensor ``name`` reads may have been changed in place by then, in a way that can make
    it fractional: ``x /= n``, ``x[:, 0] /= n``, ``x *= 0.5``, ``x.div_(n)``, in the same scope, before
    the read or in a loop around both, and not on a branch that excludes the read."""
    def rooted(target: ast.AST) -> bool:
        while isinstance(target, (ast.Subscript, ast.Attribute)):
            target = target.value
        return isinstance(target, ast.Name) and target.id == name.id

    scope = ctx.scope(name)

    def left_by_its_branch(node: ast.AST) -> bool:
        """``node`` sits in an ``if`` branch that ends in ``return`` / ``raise`` and does not hold the read."""
        around_read = {id(a) for a in ctx.ancestors(name)}
        child = node
        for anc in ctx.ancestors(node):
            if anc is scope:
                return False
            if isinstance(anc, ast.If):
                block = anc.body if child in anc.body else anc.orelse if child in anc.orelse else []
                if (block and isinstance(block[-1], (ast.Return, ast.Raise))
                        and not any(id(b) in around_read for b in block)):
                    return True
            child = anc
        return False

    def reaches(node: ast.AST) -> bool:
        if ctx.exclusive(node, name) or left_by_its_branch(node):
            return False
        loops = {id(loop) for loop in ctx.enclosing_loops(name)}
        return node.lineno <= name.lineno or any(id(loop) in loops for loop in ctx.enclosing_loops(node))

    key = ("in_place_changes", id(scope))
    changes = ctx.memo.get(key)
    if changes is None:  # once per scope: the augmented assignments and in-place method calls in it
        body = scope.body if isinstance(getattr(scope, "body", None), list) else [scope]
        changes = ctx.memo[key] = [n for n in ctx.walk_scope(body) if isinstance(n, ast.AugAssign) or (
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr.endswith("_"))]
    for node in changes:  # type: ignore[union-attr]
        if isinstance(node, ast.AugAssign) and rooted(node.target):
            if isinstance(node.op, _WHOLE_OPS) and whole_numbers(node.value, ctx, depth - 1):
                continue
            if reaches(node):
                return True
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.endswith("_")
              and not node.func.attr.startswith("_") and node.func.attr not in _INPLACE_KEEPS
              and rooted(node.func.value) and reaches(node)):
            return True
    return False
