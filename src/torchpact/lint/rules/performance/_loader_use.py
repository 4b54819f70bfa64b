"""Whether a DataLoader's batches are consumed by a loop that does per-batch work (TP920's condition).

Workers only help when loading can overlap with something: the consumer's per-batch work. A loader
consumed in this file only by loops that do nothing per batch beyond collecting or comparing it
(``batches.append(b)``, ``assert b.shape == ...``), or only by single fetches (``next(iter(loader))``),
or never used at all, has nothing to overlap with. A loop does per-batch work when its body (and the
functions of this file it calls) back-propagates, steps an optimizer, calls a module (a forward), or
calls code lint cannot judge cheap. A loader that leaves the code lint sees (returned, stored on an
object, handed to a trainer or another function) may be consumed by a training loop elsewhere.
"""

from __future__ import annotations

import ast

from torchpact.findings import Evidence
from torchpact.lint.context import FileContext
from torchpact.lint.rules.memory._training_loops import is_update_call
from torchpact.lint.rules.training._util import reaches

# Wrappers whose iteration iterates the loader (``for i, b in enumerate(tqdm(loader))``).
_ITERATING = frozenset({"enumerate", "zip", "tqdm", "tqdm.tqdm", "tqdm.auto.tqdm", "itertools.islice"})
# Calls that do no work worth overlapping with loading: bookkeeping, comparing, printing.
_CHEAP_FUNCTIONS = frozenset({
    "len", "print", "isinstance", "list", "tuple", "dict", "set", "sorted", "range", "enumerate", "zip",
    "str", "int", "float", "bool", "type", "next", "iter", "min", "max", "sum", "any", "all", "repr",
    "getattr", "hasattr", "id", "torch.equal", "torch.allclose", "torch.is_tensor", "numpy.allclose",
    "numpy.array_equal",
})
_CHEAP_METHODS = frozenset({
    "append", "extend", "add", "items", "keys", "values", "tolist", "item", "size", "dim", "numel", "format",
    "startswith", "endswith", "join", "split", "get", "equal", "copy_", "to", "cpu", "cuda", "numpy",
    "debug", "info", "warning", "write", "log", "set_postfix", "set_description", "update",
})


def callee(call: ast.AST, ctx: FileContext) -> str | None:
    """The resolved name of a call's callee, or the bare name of a builtin / unimported function."""
    if not isinstance(call, ast.Call):
        return None
    name = ctx.call_name(call)
    if name is None and isinstance(call.func, ast.Name):
        return call.func.id
    return name


def consumed_with_work(loader: ast.Call, ctx: FileContext) -> bool:
    """Whether the batches of the DataLoader built by ``loader`` may meet per-batch work (see above).
    A loader whose consumer lint cannot see counts, with an ``unresolved`` note."""
    target = _bound_name(loader, ctx)
    if target is None:
        loop = _iterating_loop(loader, ctx)
        if loop is not None:
            return _works(loop, ctx)
        if _single_fetch_or_size(loader, ctx):
            return False
        ctx.note(Evidence.UNRESOLVED, "the code that iterates the loader is not in this file")
        return True
    name, scope = target
    reads = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
    escaped = False
    for read in reads:
        loop = _iterating_loop(read, ctx)
        if loop is not None:
            if _works(loop, ctx):
                return True
            continue
        if _single_fetch_or_size(read, ctx):
            continue
        escaped = True
    if escaped:
        ctx.note(Evidence.UNRESOLVED, f"`{name}` is handed to code that may iterate it elsewhere")
    return escaped


def _bound_name(loader: ast.Call, ctx: FileContext) -> tuple[str, ast.AST] | None:
    """``name = DataLoader(...)`` (also one side of a conditional): the name and the scope to search."""
    value: ast.AST = loader
    parent = ctx.parent(loader)
    while isinstance(parent, ast.IfExp) and value is not parent.test:
        value, parent = parent, ctx.parent(parent)
    if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is value:
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        if len(targets) == 1 and isinstance(targets[0], ast.Name):
            return targets[0].id, ctx.scope(parent)
    return None


def _iterating_loop(expr: ast.AST, ctx: FileContext) -> ast.AST | None:
    """The ``for`` loop (or comprehension) that iterates ``expr``, directly or through a wrapper."""
    child = expr
    parent = ctx.parent(expr)
    while isinstance(parent, ast.Call) and child in parent.args and callee(parent, ctx) in _ITERATING:
        child, parent = parent, ctx.parent(parent)
    if isinstance(parent, (ast.For, ast.AsyncFor)) and parent.iter is child:
        return parent
    if isinstance(parent, ast.comprehension) and parent.iter is child:
        return ctx.parent(parent)
    return None


def _single_fetch_or_size(read: ast.expr, ctx: FileContext) -> bool:
    """``len(loader)``, ``next(iter(loader))``, ``loader.dataset`` / ``loader.batch_size``: one batch at most."""
    parent = ctx.parent(read)
    if isinstance(parent, ast.Attribute) and parent.attr in ("dataset", "batch_size", "sampler", "num_workers"):
        return True
    if isinstance(parent, ast.Call) and read in parent.args:
        name = callee(parent, ctx)
        if name == "len":
            return True
        if name == "iter":
            outer = ctx.parent(parent)
            return callee(outer, ctx) == "next" and parent in outer.args
    return False


def _works(loop: ast.AST, ctx: FileContext) -> bool:
    """Whether an iteration of ``loop`` does per-batch work (see the module docstring)."""
    if isinstance(loop, (ast.For, ast.AsyncFor)):
        roots: list = list(loop.body)
    else:  # a comprehension: its element and conditions run per batch
        roots = [loop.elt if hasattr(loop, "elt") else loop]  # type: ignore[attr-defined]
        roots += [c for g in loop.generators for c in g.ifs]  # type: ignore[attr-defined]
    for root in roots:
        if reaches(ctx, root, lambda n: _is_work(n, ctx)) is not None:
            return True
    return False


def _is_work(node: ast.AST, ctx: FileContext) -> bool:
    if not isinstance(node, ast.Call):
        return False
    if is_update_call(node, ctx):
        return True
    func = node.func
    name = callee(node, ctx)
    if name in _CHEAP_FUNCTIONS or (name or "").startswith(("torch.testing.", "numpy.testing.")):
        return False
    if isinstance(func, ast.Attribute) and (func.attr in _CHEAP_METHODS or func.attr.startswith("assert")):
        return False
    if isinstance(func, ast.Name) and func.id.startswith("assert"):
        return False
    if isinstance(func, ast.Name) and func.id in ctx.functions:
        return False  # followed into by ``reaches``
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self" \
            and func.attr in ctx.functions:
        return False
    return True  # a forward, a loss, or code lint cannot see into, which may do the work
