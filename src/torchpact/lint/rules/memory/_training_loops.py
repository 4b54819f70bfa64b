"""Which loops are training loops, and what runs on every one of their iterations.

Shared by the memory and performance rules that only mean something inside a training loop (one
that back-propagates or steps an optimizer on each iteration, on a module that is the same object
in every iteration), not inside a model's own loops over layers or time steps, nor in an epoch loop
that merely contains the training loop, nor in a loop over models or configurations whose
iterations each build and train a different module (``_model_loops``). A loop over models nested in
a loop is transparent: when its models are the same objects on each iteration of the outer loop (an
ensemble trained round-robin), the outer loop is the training loop.
"""

from __future__ import annotations

import ast
import re
from typing import Callable

from torchpact.findings import Evidence
from torchpact.lint.context import OPTIMIZER, SCALER, FileContext
from torchpact.lint.rules.memory._model_loops import iterates_models

_OPTIMIZER_NAME = re.compile(r"optim|^opt(_|\d|s)?$|_opt$", re.I)


def _terminal_name(expr: ast.AST) -> str | None:
    while isinstance(expr, ast.Subscript):
        expr = expr.value
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return None


def is_update_call(node: ast.AST, ctx: FileContext) -> bool:
    """``loss.backward()``, ``accelerator.backward(loss)``, ``self.manual_backward(loss)``,
    ``torch.autograd.backward(...)``, ``optimizer.step()`` or ``scaler.step(optimizer)``."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        if func.attr in ("backward", "manual_backward"):
            return True
        if func.attr == "step":
            if ctx.kinds(func.value) & {OPTIMIZER, SCALER}:
                return True
            name = _terminal_name(func.value)
            if name and _OPTIMIZER_NAME.search(name):
                ctx.note(Evidence.UNRESOLVED, f"`{name}` is taken for an optimizer by its name")
                return True
    return False


def nearest_loop(node: ast.AST, ctx: FileContext) -> ast.AST | None:
    loops = ctx.enclosing_loops(node)
    return loops[0] if loops else None


def is_step_loop(loop: ast.AST, ctx: FileContext) -> bool:
    """Whether each iteration of ``loop`` itself back-propagates or steps an optimizer (directly, or
    through a function of this file it calls), as opposed to a loop nested inside it doing so, on
    a module that is not bound anew in each iteration."""
    if not _has_update_calls(ctx):
        return False
    return ctx.remember(("step_loop", id(loop)), lambda: _is_step_loop(loop, ctx))  # type: ignore[return-value]


def _is_step_loop(loop: ast.AST, ctx: FileContext) -> bool:
    calls = [n for n in ctx.walk_scope(loop.body)  # type: ignore[attr-defined]
             if isinstance(n, ast.Call) and _own_iteration(n, loop, ctx)]
    # a backward() is sure evidence; an optimizer's step may be one by its name only: backward first
    for update in (_is_backward, is_update_call):
        for node in calls:
            if update(node, ctx) or ((fns := _local_callees(node, ctx)) and _reaches_update(fns, update, ctx)):
                return not iterates_models(loop, ctx)
    return False


def _reaches_update(fns: list[ast.AST], update: Callable[[ast.AST, FileContext], bool], ctx: FileContext) -> bool:
    """Whether ``fns`` (functions of this file), or those they call, make an ``update`` call outside a
    loop of their own."""
    return ctx.reaches(fns, lambda n: update(n, ctx) and not ctx.in_loop(n), depth=2) is not None


def _is_backward(node: ast.AST, ctx: FileContext) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
        "backward", "manual_backward")


def _own_iteration(node: ast.AST, loop: ast.AST, ctx: FileContext) -> bool:
    """``node``'s innermost loop is ``loop``, or every loop between them is a loop over models."""
    loops = ctx.enclosing_loops(node)
    if not loops or loops[0] is loop:
        return bool(loops)
    if loop not in loops:
        return False
    return all(iterates_models(inner, ctx) for inner in loops[:loops.index(loop)])


_UPDATE_ATTRS = frozenset({"backward", "manual_backward", "step"})


def _has_update_calls(ctx: FileContext) -> bool:
    """Whether any call of the file can be an update call (a file without one has no training loop)."""
    found = ctx.memo.get("has_update_calls")
    if found is None:
        found = ctx.memo["has_update_calls"] = any(
            type(c.func) is ast.Attribute and c.func.attr in _UPDATE_ATTRS for c in ctx.nodes(ast.Call))  # type: ignore[attr-defined]
    return found  # type: ignore[return-value]


def _local_callees(call: ast.Call, ctx: FileContext) -> list[ast.AST]:
    func = call.func
    if isinstance(func, ast.Name):
        return list(ctx.functions.get(func.id, []))
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
        return list(ctx.functions.get(func.attr, []))
    return []


def step_loops(node: ast.AST, ctx: FileContext) -> list[ast.AST]:
    """The training loops around ``node`` in its function, innermost first."""
    if not _has_update_calls(ctx):
        return []
    return [loop for loop in ctx.enclosing_loops(node) if is_step_loop(loop, ctx)]


def runs_every_iteration(node: ast.AST, loop: ast.AST, ctx: FileContext) -> bool:
    """Whether ``node`` runs on every iteration of ``loop``: no ``if`` branch, ``except`` handler,
    ``match`` case or short-circuit operand stands between them."""
    child = node
    for anc in ctx.ancestors(node):
        if anc is loop:
            return True
        if isinstance(anc, (ast.If, ast.IfExp, ast.While)) and child is not anc.test:
            if isinstance(anc, ast.While) and anc in ctx.enclosing_loops(node):
                child = anc
                continue  # an inner loop's body runs on each outer iteration
            return False
        if isinstance(anc, (ast.ExceptHandler, ast.match_case)):
            return False
        if isinstance(anc, ast.BoolOp) and child is not anc.values[0]:
            return False
        if isinstance(anc, ast.Try) and child in anc.orelse:
            return False
        if isinstance(anc, (ast.For, ast.AsyncFor)) and child in anc.orelse:
            return False
        child = anc
    return False
