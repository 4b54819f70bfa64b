"""Analysis the autograd rules share: leaves that require grad, in-place ops, grad mode, order."""

from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Evidence
from torchpact.lint.context import MODULE, FileContext, is_const, keyword

# Trailing-underscore methods that are not in-place writes of the tensor's values (allowed on leaves).
NOT_INPLACE = {"requires_grad_", "detach_", "share_memory_", "retain_grad", "register_hook", "record_stream"}

# Functions whose body frameworks run with gradients disabled.
NO_GRAD_HOOKS = {"validation_step", "test_step", "predict_step", "evaluation_step", "prediction_step",
                 "generate", "evaluate", "eval_step", "inference", "predict"}

NO_GRAD_HOOK_PREFIXES = ("validation_", "on_validation_", "on_test_", "on_predict_", "predict_", "eval")

PARAMETER_ITERATORS = {"parameters": None, "named_parameters": 1}

# Calls that only run with gradients on: a function making them is training code.
TRAINING_CALLS = {"backward", "step", "manual_backward"}


def inplace_method(node: ast.AST) -> str | None:
    """``x.add_(...)`` -> ``"add_"``: the name of an in-place method call, else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        attr = node.func.attr
        if attr.endswith("_") and not attr.startswith("_") and attr not in NOT_INPLACE:
            return attr
    return None


def inplace_writes(stmt_or_expr: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]:
    """(write node, written tensor expression) for in-place writes directly in this node."""
    node = stmt_or_expr
    if isinstance(node, ast.Call) and inplace_method(node):
        yield node, node.func.value  # type: ignore[attr-defined]
    elif isinstance(node, ast.AugAssign):
        yield node, node.target
    elif isinstance(node, ast.Assign):
        for t in node.targets:
            if isinstance(t, ast.Subscript):
                yield node, t.value


def set_grad_enabled_false(ctx: FileContext, call: ast.AST) -> bool:
    return (isinstance(call, ast.Call)
            and ctx.is_call_to(call, "torch.set_grad_enabled", "torch.autograd.set_grad_enabled",
                               "torch.autograd.grad_mode.set_grad_enabled")
            and bool(call.args) and is_const(call.args[0], False))


def grad_off(ctx: FileContext, node: ast.AST) -> bool:
    """Whether gradients may well be disabled where ``node`` runs (a block, a decorator, a
    statement-level ``torch.set_grad_enabled(False)`` before it, a framework's no-grad hook, or a
    function of this file that is only called with gradients disabled). Conservative: rules that
    flag something only wrong with grad enabled skip nodes for which this is true."""
    if ctx.grad_disabled(node):
        return True
    line = getattr(node, "lineno", 0)
    for root in (ctx.scope(node), ctx.tree):
        first = _first_grad_off_line(ctx, root)
        if first is not None and first < line:
            return True
    fn = ctx.enclosing_function(node)
    return fn is not None and _no_grad_function(ctx, fn)


def _first_grad_off_line(ctx: FileContext, root: ast.AST) -> int | None:
    cached = getattr(root, "tp_grad_off_line", False)
    if cached is not False:
        return cached
    found = None
    for stmt in ctx.walk_scope(scope_body(root)):
        if isinstance(stmt, ast.Expr) and set_grad_enabled_false(ctx, stmt.value):
            found = stmt.lineno if found is None else min(found, stmt.lineno)
    root.tp_grad_off_line = found  # type: ignore[attr-defined]
    return found


def _no_grad_function(ctx: FileContext, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A framework's no-grad hook, or a function of this file only ever called with grad disabled."""
    cached = getattr(fn, "tp_no_grad_function", None)
    if cached is not None:
        return cached
    # (not ``test_*``: those are pytest tests, which run with gradients on)
    result = fn.name in NO_GRAD_HOOKS or fn.name.startswith(NO_GRAD_HOOK_PREFIXES)
    if not result:
        calls = [c for c in ctx.nodes(ast.Call) if _calls_function(c, fn.name)]
        result = bool(calls) and all(ctx.grad_disabled(c) for c in calls)
    fn.tp_no_grad_function = result  # type: ignore[attr-defined]
    return result


def note_grad_mode(ctx: FileContext, node: ast.AST) -> None:
    """For a rule that needs gradients on at ``node`` (and has checked ``grad_off``): module-level
    code, a function that trains (``.backward()``, ``.step()``) or one this file calls show it; any
    other function may be called with gradients disabled from code this file does not show."""
    fn = ctx.enclosing_function(node)
    if fn is None:
        return
    shown = getattr(fn, "tp_grad_mode_shown", None)
    if shown is None:
        shown = fn.tp_grad_mode_shown = trains(ctx, fn) or any(  # type: ignore[attr-defined]
            _calls_function(c, fn.name) for c in ctx.nodes(ast.Call))
    if not shown:
        ctx.note(Evidence.MAY, f"`{fn.name}` may be called with gradients disabled by code this file does not show")


def trains(ctx: FileContext, scope: ast.AST) -> bool:
    """``scope`` calls ``.backward()`` or ``.step()`` (training code, which runs with gradients on)."""
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in TRAINING_CALLS
               for node in ctx.walk_scope(scope_body(scope)))


def note_parameters_of(ctx: FileContext, owner: ast.AST) -> None:
    """For a name bound by ``for p in x.parameters()``: ``p`` is a parameter as surely as ``x`` is a module."""
    receiver = owner.iter.func.value  # type: ignore[attr-defined]
    if MODULE not in ctx.kinds(receiver):
        ctx.note(Evidence.UNRESOLVED, f"`{ctx.segment(receiver)}` is not resolved to a module")


def _calls_function(call: ast.Call, name: str) -> bool:
    f = call.func
    return (isinstance(f, ast.Name) and f.id == name) or (isinstance(f, ast.Attribute) and f.attr == name)


def is_torch_factory(ctx: FileContext, call: ast.AST) -> bool:
    qn = ctx.call_name(call)
    if not qn or not qn.startswith("torch."):
        return False
    last = qn.rsplit(".", 1)[-1]
    return qn.count(".") == 1 and last[:1].islower()


def is_parameter_call(ctx: FileContext, call: ast.AST) -> bool:
    return ctx.is_call_to(call, "torch.nn.Parameter", "torch.nn.parameter.Parameter")


VARIABLE = {"torch.autograd.Variable", "torch.autograd.variable.Variable"}
# Methods that keep a fresh, no-grad factory result a plain tensor (so ``.requires_grad_()`` after
# them makes a leaf).
FRESH_METHODS = {"to", "cuda", "cpu", "float", "double", "half", "bfloat16", "clone", "contiguous",
                 "normal_", "uniform_", "fill_", "zero_", "view", "reshape", "t"}


def creates_grad_leaf(ctx: FileContext, value: ast.AST | None, chains: bool = True) -> bool:
    """``torch.randn(3, requires_grad=True)``, ``nn.Parameter(...)`` (not turned off),
    ``Variable(x, requires_grad=True)``; with ``chains``, also ``torch.zeros(3).uniform_().requires_grad_()``
    and ``x.detach().requires_grad_()``."""
    if not isinstance(value, ast.Call):
        return False
    if is_parameter_call(ctx, value):
        rg = keyword(value, "requires_grad")
        if rg is None and len(value.args) > 1:
            rg = value.args[1]
        return rg is None or is_const(rg, True)
    if ctx.call_name(value) in VARIABLE:
        return is_const(keyword(value, "requires_grad"), True)
    if chains and isinstance(value.func, ast.Attribute) and value.func.attr == "requires_grad_" and (
            not value.args or is_const(value.args[0], True)):
        base = value.func.value
        if (isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute)
                and base.func.attr in ("detach", "detach_")):
            return True
        while isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute) and base.func.attr in FRESH_METHODS \
                and ctx.resolve(base.func) is None:
            base = base.func.value
        return is_torch_factory(ctx, base) and keyword(base, "requires_grad") is None  # type: ignore[arg-type]
    return is_torch_factory(ctx, value) and is_const(keyword(value, "requires_grad"), True)


def parameter_loop_binding(ctx: FileContext, owner: ast.AST, name: str) -> bool:
    """``for p in model.parameters()`` / ``for n, p in model.named_parameters()`` binds ``p``."""
    if not isinstance(owner, (ast.For, ast.AsyncFor)):
        return False
    it = owner.iter
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in PARAMETER_ITERATORS):
        return False
    index = PARAMETER_ITERATORS[it.func.attr]
    target = owner.target
    if index is None:
        return isinstance(target, ast.Name) and target.id == name
    return (isinstance(target, ast.Tuple) and len(target.elts) == 2 and isinstance(target.elts[index], ast.Name)
            and target.elts[index].id == name)


def name_key(expr: ast.AST) -> str | None:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        return f"{expr.value.id}.{expr.attr}"
    return None


def grad_leaf(ctx: FileContext, expr: ast.AST) -> bool:
    """Every binding of the name ``expr`` makes it a leaf that requires grad."""
    key = name_key(expr)
    if key is None or key not in leaf_keys(ctx):
        return False
    binds = ctx.bindings(expr)
    if not binds:
        return False
    loops = []
    for owner, value in binds:
        if isinstance(expr, ast.Name) and parameter_loop_binding(ctx, owner, expr.id):
            loops.append(owner)
            continue
        if not creates_grad_leaf(ctx, value):
            return False
    if turns_off_grad(ctx, expr, key):
        return False
    for owner in loops:
        note_parameters_of(ctx, owner)
    return True


def leaf_keys(ctx: FileContext) -> set[str]:
    """Every name (``w``, ``self.w``) that some binding of the file may make a leaf requiring grad: the
    target of a value that ``creates_grad_leaf`` (or a tuple of values holding one), or a loop over
    ``.parameters()``. ``grad_leaf`` and TP202 need one such binding, so any other name is answered at once,
    without the dataflow of its scope."""
    found = ctx.memo.get("leaf_keys")
    if found is not None:
        return found  # type: ignore[return-value]
    found = set()
    for node in ctx.nodes(ast.Assign, ast.AnnAssign, ast.NamedExpr, ast.withitem, ast.For, ast.AsyncFor):
        if isinstance(node, (ast.For, ast.AsyncFor)):
            it = node.iter
            if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in PARAMETER_ITERATORS:
                found.update(_target_keys(node.target))
            continue
        value = node.context_expr if isinstance(node, ast.withitem) else node.value
        if _holds_leaf(ctx, value):
            targets = node.targets if isinstance(node, ast.Assign) else [
                node.optional_vars if isinstance(node, ast.withitem) else node.target]
            for t in targets:
                found.update(_target_keys(t))
    ctx.memo["leaf_keys"] = found
    return found


def _holds_leaf(ctx: FileContext, value: ast.AST | None) -> bool:
    if isinstance(value, (ast.Tuple, ast.List)):
        return any(_holds_leaf(ctx, v.value if isinstance(v, ast.Starred) else v) for v in value.elts)
    return creates_grad_leaf(ctx, value)


def _target_keys(target: ast.AST | None) -> list[str]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [k for elt in target.elts for k in _target_keys(elt)]
    if isinstance(target, ast.Starred):
        return _target_keys(target.value)
    key = name_key(target) if target is not None else None
    return [key] if key is not None else []


def turns_off_grad(ctx: FileContext, expr: ast.AST, key: str) -> bool:
    """``x.requires_grad_(False)``, ``x.requires_grad = False`` or ``x.detach_()`` in the scope."""
    return key in _grad_turned_off(ctx, ctx.scope(expr))


def _grad_turned_off(ctx: FileContext, scope: ast.AST) -> set[str]:
    """The names whose grad a scope turns off; one walk per scope, however many names are asked."""
    memo_key = ("grad_turned_off", id(scope))
    found = ctx.memo.get(memo_key)
    if found is not None:
        return found
    found = set()
    body = scope.body if isinstance(getattr(scope, "body", None), list) else [scope]
    for node in ctx.walk_scope(body):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("detach_",) or (node.func.attr == "requires_grad_" and node.args
                                                   and not is_const(node.args[0], True)):
                key = name_key(node.func.value)
                if key is not None:
                    found.add(key)
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Attribute) and t.attr == "requires_grad":
                    key = name_key(t.value)
                    if key is not None:
                        found.add(key)
    ctx.memo[memo_key] = found
    return found


def pos(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def end_pos(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "end_lineno", 0) or 0, getattr(node, "end_col_offset", 0) or 0)


def scope_body(scope: ast.AST) -> list[ast.AST]:
    body = getattr(scope, "body", None)
    return body if isinstance(body, list) else [scope]


def root_name(expr: ast.AST) -> str | None:
    """``model.fc.weight`` -> ``model``; ``x[0].data`` -> ``x``."""
    cur = expr
    while isinstance(cur, (ast.Attribute, ast.Subscript)):
        cur = cur.value
    if isinstance(cur, ast.Call) and isinstance(cur.func, ast.Attribute):
        return root_name(cur.func.value)
    return cur.id if isinstance(cur, ast.Name) else None
