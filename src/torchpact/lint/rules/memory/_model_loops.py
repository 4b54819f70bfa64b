"""Whether a loop that back-propagates is a loop over models rather than the steps of one training run.

A training-step loop repeats ``backward()`` / ``optimizer.step()`` on one module, bound before the
loop and the same object on every iteration: what one step leaves behind (gradients in ``.grad``,
the eval/train mode, blocks in the caching allocator, a host sync per step) meets the next step.
A loop whose iterations each back-propagate through a module bound anew in that iteration — built
by a constructor or a factory call, a ``copy.deepcopy``, or taken as the item of the collection the
loop iterates (a model zoo, a dict of configurations) — runs one short life per model; none of those
carries over to the next model, which has its own parameters (and often other shapes).

The modules are those called in the computation of what ``backward()`` is called on (followed
through the names bound in the loop) and those handed to a function of the file that
back-propagates. A loop is over models only when at least one is found and every one is bound anew
on each iteration; a callee the analysis cannot place keeps the loop a training loop.
"""

from __future__ import annotations

import ast
import re

from torchpact.lint.context import DDP, LOSS_FN, MODULE, NUMBER, FileContext, MODULE_RETURNING_METHODS
from torchpact.lint.dataflow import _Iterated, _Unpacked
from torchpact.lint.analysis.following import follows_definitions

_MODULE_KINDS = {MODULE, DDP}
# What a module may be called when its kind is not known: the argument that makes a call a wrapper
# of an existing model (``DDP(model)``, ``torch.compile(net)``) rather than a new one.
_MODEL_NAME = re.compile(r"^(model|net|network|module|backbone|student|teacher|policy|base)$"
                         r"|_(model|net|module)$", re.I)
_DEPTH = 4


def iterates_models(loop: ast.AST, ctx: FileContext) -> bool:
    """Whether every module ``loop``'s iterations back-propagate through is bound anew in each
    iteration (constructor, factory, deepcopy, or the loop's own item)."""
    cached = getattr(loop, "_tp_iterates_models", None)
    if cached is not None:
        return cached
    result = bool(ctx.unnoted(lambda: _iterates_models(loop, ctx)))
    loop._tp_iterates_models = result  # type: ignore[attr-defined]
    return result


def _iterates_models(loop: ast.AST, ctx: FileContext) -> bool:
    modules = _trained_modules(loop, ctx)
    return bool(modules) and all(_fresh(m, loop, ctx, 0) for m in modules)


def _trained_modules(loop: ast.AST, ctx: FileContext) -> list[ast.expr]:
    out: list[ast.expr] = []
    for node in ctx.walk_scope(loop.body):  # type: ignore[attr-defined]
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            if isinstance(node, ast.Call) and _local_trainer(node, ctx):
                out.extend(a for a in _call_args(node) if _may_be_module(a, ctx))
            continue
        if node.func.attr in ("backward", "manual_backward"):
            for part in (node.func.value, *node.args):
                _callees(part, loop, ctx, out, _DEPTH)
        elif _local_trainer(node, ctx):
            out.extend(a for a in _call_args(node) if _may_be_module(a, ctx))
    return out


def _local_trainer(call: ast.Call, ctx: FileContext) -> bool:
    """``train_step(model, batch)`` / ``self.fit_one(model)``: a function of this file that back-propagates."""
    func = call.func
    if isinstance(func, ast.Name):
        fns = ctx.functions.get(func.id, [])
    elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ("self", "cls"):
        fns = ctx.functions.get(func.attr, [])
    else:
        return False
    return bool(fns) and ctx.reaches(list(fns), lambda n: isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                                     and n.func.attr in ("backward", "manual_backward"), depth=2) is not None


def _call_args(call: ast.Call) -> list[ast.expr]:
    return [*call.args, *(k.value for k in call.keywords)]


@follows_definitions(None)
def _callees(expr: ast.AST, loop: ast.AST, ctx: FileContext, out: list[ast.expr], depth: int) -> None:
    """The modules called in ``expr``, following names to what the loop binds them to."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, (ast.Name, ast.Attribute)) and _is_module_callee(func, ctx):
                out.append(func)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and depth > 0:
            for owner, value in ctx.bindings(node):
                if value is not None and not isinstance(value, (_Iterated, _Unpacked)) and _inside(owner, loop, ctx):
                    _callees(value, loop, ctx, out, depth - 1)
                elif isinstance(value, _Unpacked) and _inside(owner, loop, ctx):
                    _callees(value.value, loop, ctx, out, depth - 1)


def _is_module_callee(func: ast.expr, ctx: FileContext) -> bool:
    """A callee that is (or may be) a model: a module by kind, or a name bound in the file to
    something other than a function, a class or an import (``model = model_fn()``, a loop item)."""
    kinds = ctx.kinds(func)
    if LOSS_FN in kinds:
        return False
    if kinds & _MODULE_KINDS:
        return True
    if kinds or not isinstance(func, ast.Name) or ctx.resolve(func) is not None:
        return False
    if func.id in ctx.functions or func.id in ctx.classes:
        return False
    return bool(ctx.bindings(func))


def _may_be_module(expr: ast.expr, ctx: FileContext) -> bool:
    if not isinstance(expr, (ast.Name, ast.Attribute)):
        return False
    if ctx.kinds(expr) & _MODULE_KINDS:
        return True
    name = expr.id if isinstance(expr, ast.Name) else expr.attr
    return bool(_MODEL_NAME.search(name)) and NUMBER not in ctx.kinds(expr)


def _inside(owner: ast.AST, loop: ast.AST, ctx: FileContext) -> bool:
    return owner is loop or any(a is loop for a in ctx.ancestors(owner))


@follows_definitions(False)
def _fresh(expr: ast.expr, loop: ast.AST, ctx: FileContext, depth: int) -> bool:
    """Whether ``expr`` holds a module bound anew on every iteration of ``loop``."""
    if depth > _DEPTH:
        return False
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        return _fresh_attribute(expr, loop, ctx, depth)
    if not isinstance(expr, ast.Name):
        return False
    binds = ctx.bindings(expr)
    if not binds:
        return False
    for owner, value in binds:
        if not _inside(owner, loop, ctx):
            return False  # a module bound before the loop reaches this use: the same on every iteration
        if isinstance(owner, (ast.For, ast.AsyncFor)):
            if owner is not loop:
                return False  # an item of an inner loop: the same objects on each iteration of this one
            continue
        if not _every_iteration(owner, loop, ctx) or not _new_value(value, loop, ctx, depth + 1):
            return False  # `if step == 0: model = Net()` builds one model that later iterations reuse
    return True


def _every_iteration(node: ast.AST, loop: ast.AST, ctx: FileContext) -> bool:
    from torchpact.lint.rules.memory._training_loops import runs_every_iteration  # (it imports this module)

    return runs_every_iteration(node, loop, ctx)


def _fresh_attribute(expr: ast.Attribute, loop: ast.AST, ctx: FileContext, depth: int) -> bool:
    """``self.model = Net(cfg)`` on every iteration, before the use."""
    text = ctx.segment(expr)
    for node in ctx.walk_scope(loop.body):  # type: ignore[attr-defined]
        if isinstance(node, ast.Assign) and node.lineno < expr.lineno and _every_iteration(node, loop, ctx) \
                and any(ctx.segment(t) == text for t in node.targets):
            return _new_value(node.value, loop, ctx, depth + 1)
    return False


def _new_value(value: ast.AST | None, loop: ast.AST, ctx: FileContext, depth: int) -> bool:
    """Whether ``value`` makes a new module (or takes one per iteration) rather than reusing one."""
    if isinstance(value, _Unpacked):
        value = value.value
    # `Net().to(device).train()`: methods that return the module they are called on
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
            and value.func.attr in MODULE_RETURNING_METHODS:
        value = value.func.value
    if isinstance(value, ast.Name):
        return _fresh(value, loop, ctx, depth)
    if isinstance(value, ast.Subscript):
        # `models[i]`, `zoo[name]`: an item picked per iteration (a constant key picks the same one)
        return not isinstance(value.slice, ast.Constant)
    if not isinstance(value, ast.Call):
        return False
    if (ctx.call_name(value) or "").rsplit(".", 1)[-1] == "deepcopy" or (
            isinstance(value.func, ast.Name) and value.func.id == "deepcopy"):
        return True
    # A constructor or factory makes a new module unless it wraps one that outlives the iteration
    # (`DDP(model)`, `torch.compile(net)`, `model.get_submodule(...)`).
    func = value.func
    parts = [*_call_args(value), *([func.value] if isinstance(func, ast.Attribute) else [])]
    for part in parts:
        root = part
        while isinstance(root, ast.Attribute) and not (isinstance(root.value, ast.Name) and root.value.id == "self"):
            root = root.value
        if _may_be_module(root, ctx) and not _fresh(root, loop, ctx, depth):
            return False
    return True
