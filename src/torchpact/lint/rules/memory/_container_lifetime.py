"""Whether a container that a training loop stores into lives past one iteration: something on a
path inside the loop re-creates, empties or trims it (also in a helper of this file the loop calls),
or what it holds is back-propagated or handed to the caller, so nothing accumulates across steps."""

from __future__ import annotations

import ast

from torchpact.lint.context import FileContext

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
    for _ in range(3):
        before = len(names)
        for a in assigns:
            if any(mentioned(t) & names for t in a.targets):
                names |= mentioned(a.value)
        if len(names) == before:
            break
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
    for _ in range(3):  # ``loss = sum(losses); return loss``
        before = len(returned)
        for a in assigns:
            if any(mentioned(t) & returned for t in a.targets):
                returned |= mentioned(a.value)
        if len(returned) == before:
            break
    return root.id in returned


def mentioned(expr: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(expr):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
    return out
