"""Whether a container that a training loop stores into lives past one iteration: something on a
path inside the loop re-creates, empties or trims it (also in a helper of this file the loop calls),
or what it holds is back-propagated or handed to the caller, so nothing accumulates across steps."""

from __future__ import annotations

import ast

from torchpact.lint.context import FileContext
from torchpact.lint.rules.memory._training_loops import runs_every_iteration

SHRINKERS = {"clear", "pop", "popleft", "popitem", "remove"}
DIFFERENTIATORS = {"backward", "manual_backward", "grad"}


def reset_inside(container: ast.expr, root: ast.expr, loop: ast.AST, node: ast.AST, ctx: FileContext) -> bool:
    """Whether the container is re-created, emptied or trimmed on some path inside the training
    loop: in the loop itself, or in a helper of this file the loop calls (a method that resets
    ``self.<name>``, a function given the container that empties it, one that re-binds it ``global``)."""
    if resets(ctx.walk_scope(loop.body), (container, root), node, rebinding=True):  # type: ignore[attr-defined]
        return True
    for call in ctx.walk_scope(loop.body):  # type: ignore[attr-defined]
        if isinstance(call, ast.Call):
            for fn, forms, rebinding in helpers_given(call, root, ctx):
                if resets(ctx.walk_scope(fn.body), forms, None, rebinding):
                    return True
    return False


def resets(nodes, forms: tuple[ast.AST, ...], node: ast.AST | None, rebinding: bool) -> bool:
    """Whether one of ``nodes`` re-binds (when ``rebinding``), deletes, slice-assigns or shrinks one of
    ``forms`` (``losses = []``, ``del losses[:]``, ``losses[:] = []``, ``losses.clear()``)."""
    for other in nodes:
        if other is node:
            continue
        targets: list[ast.AST] = []
        if isinstance(other, ast.Assign):
            targets = [t.value if whole_slice(t) else t for t in other.targets]
        elif isinstance(other, (ast.AnnAssign, ast.NamedExpr)):
            targets = [other.target]
        elif isinstance(other, (ast.For, ast.AsyncFor)):
            targets = [other.target]
        elif isinstance(other, ast.withitem) and other.optional_vars is not None:
            targets = [other.optional_vars]
        elif isinstance(other, ast.Delete):
            targets = [t.value if isinstance(t, ast.Subscript) else t for t in other.targets]
        elif isinstance(other, ast.Call) and isinstance(other.func, ast.Attribute) and other.func.attr in SHRINKERS:
            targets = [other.func.value]
        mutation = isinstance(other, (ast.Delete, ast.Call)) or (
            isinstance(other, ast.Assign) and any(whole_slice(t) for t in other.targets))
        if not (rebinding or mutation):
            continue
        for t in targets:
            for part in ast.walk(t) if isinstance(t, (ast.Tuple, ast.List)) else [t]:
                if any(same(part, form) for form in forms):
                    return True
    return False


def same(a: ast.AST, b: ast.AST) -> bool:
    """The same name or attribute chain, read or written (``losses`` = ``losses = []``'s target)."""
    while isinstance(a, (ast.Attribute, ast.Subscript)) and type(a) is type(b):
        if isinstance(a, ast.Attribute) and a.attr != b.attr:  # type: ignore[attr-defined]
            return False
        if isinstance(a, ast.Subscript) and ast.dump(a.slice) != ast.dump(b.slice):  # type: ignore[attr-defined]
            return False
        a, b = a.value, b.value  # type: ignore[attr-defined]
    if isinstance(a, ast.Name) and isinstance(b, ast.Name):
        return a.id == b.id
    return False


def whole_slice(target: ast.AST) -> bool:
    return isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Slice)


def helpers_given(call: ast.Call, root: ast.expr, ctx: FileContext):
    """(function, forms the container has in it, whether re-binding it there resets it) for a call
    to a local helper that can reach the container."""
    func = call.func
    if isinstance(root, ast.Attribute) and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
            and isinstance(root.value, ast.Name) and func.value.id == root.value.id == "self":
        cls = ctx.enclosing_class(call)
        method = ctx.method(cls, func.attr) if cls is not None else None
        if method is not None:
            yield method, (root,), True
        return
    if not isinstance(func, ast.Name):
        return
    for fn in ctx.functions.get(func.id, []):
        params = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
        for i, arg in enumerate(call.args):
            if i < len(params) and same(arg, root):
                yield fn, (ast.Name(id=params[i], ctx=ast.Load()),), False
        for kw in call.keywords:
            if kw.arg and same(kw.value, root):
                yield fn, (ast.Name(id=kw.arg, ctx=ast.Load()),), False
        if isinstance(root, ast.Name) and any(isinstance(n, ast.Global) and root.id in n.names for n in ast.walk(fn)):
            yield fn, (root,), True


def differentiated_names(scope: ast.AST, ctx: FileContext) -> set[str]:
    """Names whose values reach a ``backward()`` / ``autograd.grad()`` in ``scope``, following
    assignments backwards (``total = sum(losses); total.backward()`` gives ``losses``)."""
    cached = getattr(scope, "_tp_differentiated", None)
    if cached is not None:
        return cached
    body = scope.body if isinstance(getattr(scope, "body", None), list) else [scope]
    names: set[str] = set()
    assigns: list[ast.Assign] = []
    for node in ctx.walk_scope(body):
        if isinstance(node, ast.Assign):
            assigns.append(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in DIFFERENTIATORS:
            for part in [node.func.value, *node.args, *(k.value for k in node.keywords)]:
                names |= mentioned(part)
    _through_assignments(names, assigns)
    scope._tp_differentiated = names  # type: ignore[attr-defined]
    return names


def handed_to_caller(root: ast.expr, scope: ast.AST, ctx: FileContext) -> bool:
    """A container this function creates and returns (``return sum(losses)``): it lives for one call
    and the caller back-propagates or drops it, so nothing accumulates across training steps here."""
    if not isinstance(root, ast.Name) or not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    binds = ctx.assignments(scope).get(root.id, [])
    if not binds or any(isinstance(owner, ast.arg) for owner, _ in binds):
        return False
    returned: set[str] = set()
    assigns: list[ast.Assign] = []
    for node in ctx.walk_scope(scope.body):
        if isinstance(node, ast.Return) and node.value is not None:
            returned |= mentioned(node.value)
        elif isinstance(node, ast.Assign):
            assigns.append(node)
    _through_assignments(returned, assigns)  # ``loss = sum(losses); return loss``
    return root.id in returned


def _through_assignments(names: set[str], assigns: list[ast.Assign]) -> None:
    """Add to ``names`` what the assignments to them read, through up to three hops (``a = b; c = a``)."""
    for _ in range(3):
        before = len(names)
        for a in assigns:
            if any(mentioned(t) & names for t in a.targets):
                names |= mentioned(a.value)
        if len(names) == before:
            break


def mentioned(expr: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(expr):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
    return out


def constant_trips(loop: ast.AST) -> bool:
    """A ``for`` loop over ``range`` of int literals or over a literal list / tuple: its trip count is a
    constant of the code."""
    if not isinstance(loop, (ast.For, ast.AsyncFor)):
        return False
    it = loop.iter
    if isinstance(it, (ast.List, ast.Tuple)):
        return True
    return (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and bool(it.args)
            and not it.keywords and all(isinstance(a, ast.Constant) and type(a.value) is int for a in it.args))


def back_propagated_before(value: ast.AST, store: ast.AST, loop: ast.AST, ctx: FileContext) -> bool:
    """``value`` is a name (or a method chain on it, ``loss.cpu()``) whose ``.backward()`` — directly or
    through ``scaler.scale(name)`` — runs earlier in every iteration of ``loop``, on the same binding."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and not value.args:
        value = value.func.value
    if not isinstance(value, ast.Name):
        return False
    held = {id(o) for o, _ in ctx.bindings(value)}
    for call in ctx.walk_scope(loop.body):  # type: ignore[attr-defined]
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "backward"):
            continue
        target = call.func.value
        if isinstance(target, ast.Call) and isinstance(target.func, ast.Attribute) and target.func.attr == "scale" \
                and target.args:
            target = target.args[0]
        if (isinstance(target, ast.Name) and target.id == value.id and {id(o) for o, _ in ctx.bindings(target)} == held
                and (call.lineno, call.col_offset) < (store.lineno, store.col_offset)
                and runs_every_iteration(call, loop, ctx)):
            return True
    return False
