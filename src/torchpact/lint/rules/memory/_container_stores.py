"""What ``graph_kept_in_container`` (TP102) reads of a store: the container and the values a statement
stores in it, whether a value carries an autograd graph, whether the container is one that grows
(a list, dict, set or deque without ``maxlen``), and whether its name stays in this function (so the
fix can detach what it stores)."""

from __future__ import annotations

import ast

from torchpact.lint.context import GRAPH, LOSS, OUTPUT, FileContext
from torchpact.lint.rules.memory._container_lifetime import mentioned

ADDERS = {"append", "extend", "insert", "appendleft", "add"}
CONTAINER_FACTORIES = {"list", "dict", "set", "deque", "defaultdict", "OrderedDict"}


def stored(node: ast.AST) -> tuple[ast.expr, list[ast.expr]] | None:
    """(container, values stored) for ``c.append(v)``, ``c[i] = v``, ``c += [v]``."""
    if isinstance(node, ast.Call):
        func = node.func
        if not isinstance(func, ast.Attribute) or func.attr not in ADDERS or not node.args:
            return None
        value = node.args[-1] if func.attr == "insert" else node.args[0]
        if len(node.args) != (2 if func.attr == "insert" else 1) or node.keywords:
            return None
        if func.attr == "extend":
            return func.value, elements(value) if isinstance(value, (ast.List, ast.Tuple)) else [value]
        return func.value, elements(value)
    if isinstance(node, ast.Assign):
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Subscript):
            return None
        return node.targets[0].value, elements(node.value)
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
        if isinstance(node.value, (ast.List, ast.Tuple)):
            return node.target, [e for elt in node.value.elts for e in elements(elt)]
    return None


def elements(value: ast.expr) -> list[ast.expr]:
    """The tensors a stored value is made of: the elements of a tuple/list/dict literal, else itself."""
    if isinstance(value, (ast.Tuple, ast.List, ast.Set)):
        return [e for elt in value.elts for e in elements(elt.value if isinstance(elt, ast.Starred) else elt)]
    if isinstance(value, ast.Dict):
        return [e for v in value.values for e in elements(v)]
    return [value]


def container_root(container: ast.expr) -> ast.expr | None:
    """``losses`` / ``self.losses`` for ``losses``, ``self.losses``, ``history["loss"]``."""
    while isinstance(container, ast.Subscript):
        if not isinstance(container.slice, ast.Constant):
            return None
        container = container.value
    if isinstance(container, ast.Name):
        return container
    if isinstance(container, ast.Attribute) and isinstance(container.value, ast.Name):
        return container
    return None


def root_name(root: ast.expr) -> str:
    return root.id if isinstance(root, ast.Name) else root.attr  # type: ignore[union-attr]


def carries_graph(value: ast.expr, ctx: FileContext) -> bool:
    kinds = ctx.kinds(value)
    if GRAPH in kinds and kinds & {LOSS, OUTPUT}:
        return True
    # a field of a model's output object (``outputs.loss``, ``outputs.logits``), directly or by name
    fields = [value] if isinstance(value, ast.Attribute) else [
        v for owner, v in ctx.bindings(value) if isinstance(v, ast.Attribute) and not ctx.grad_disabled(owner)
    ] if isinstance(value, ast.Name) else []
    for f in fields:
        base = ctx.kinds(f.value)  # type: ignore[union-attr]
        if OUTPUT in base and GRAPH in base:
            return True
    return False


def detached(value: ast.expr, ctx: FileContext) -> str:
    text = ctx.locator.source(value)
    simple = isinstance(value, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
    return f"{text}.detach()" if simple else f"({text}).detach()"


def varies_per_iteration(target: ast.Subscript, loop: ast.AST, ctx: FileContext) -> bool:
    """Whether ``c[key] = v`` writes a new slot on each iteration: the key uses a name the loop binds
    or changes (``outs[i]``, ``outs[step]`` with ``step += 1``)."""
    names = {n.id for n in ast.walk(target.slice) if isinstance(n, ast.Name)}
    if not names:
        return False
    changed = set()
    if isinstance(loop, (ast.For, ast.AsyncFor)):
        changed |= {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    for node in ctx.walk_scope(loop.body):  # type: ignore[attr-defined]
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.NamedExpr)) else []
        for t in targets:
            changed |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
    return bool(names & changed)


def is_container(root: ast.expr, ctx: FileContext) -> bool:
    """Whether the name is bound to a list / dict / set / deque (a literal or a constructor call)."""
    for value in ctx.values(root):
        if isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp)):
            return True
        if isinstance(value, ast.Call):
            func = value.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in CONTAINER_FACTORIES:
                return True
    return False


def is_bounded(root: ast.expr, ctx: FileContext) -> bool:
    """``collections.deque(maxlen=...)`` keeps a fixed number of entries."""
    for value in ctx.values(root):
        if isinstance(value, ast.Call) and any(k.arg == "maxlen" for k in value.keywords):
            return True
        if isinstance(value, ast.Call) and len(value.args) >= 2 and (ctx.call_name(value) or "").endswith("deque"):
            return True
    return False


def local_and_kept(name: str, scope: ast.AST, ctx: FileContext) -> bool:
    """The name is bound in this function (not a parameter, global or nonlocal) and does not leave it."""
    binds = ctx.assignments(scope).get(name, [])
    if not binds or any(isinstance(owner, ast.arg) for owner, _ in binds):
        return False
    body = scope.body if isinstance(getattr(scope, "body", None), list) else [scope]
    for node in ctx.walk_scope(body):
        if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return False
        if (isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)) and node.value is not None
                and name in mentioned(node.value)):
            return False
    if scope is ctx.tree:
        return True
    # a nested function could read it later; a closure reference means it leaves this frame
    for node in ast.walk(scope):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and node is not scope:
            if name in mentioned(node):
                return False
    return True
