"""Shared analysis for the training-loop rules: backward calls, optimizer steps, gradient zeroing,
train/eval mode switches — found directly or through the file's own helper functions."""

from __future__ import annotations

import ast
import re
from typing import Iterator

from torchpact.findings import Evidence
from torchpact.lint.context import (
    OPTIMIZER,
    SCALER,
    SCHEDULER,
    FileContext,
    is_const,
    keyword,
)
from torchpact.lint.analysis.syntax import mentions_grad
from torchpact.lint.project import ZERO_GRAD
from torchpact.lint.rules.memory._model_loops import iterates_models

_OPTIMIZER_NAME = re.compile(r"^(opt|optim|optimizer|optimiser)s?(_\w+)?$|_(opt|optim|optimizer|optimiser)$")
_ZERO_HELPER = re.compile(r"(zero|clear|reset|free)_?\w*grad", re.IGNORECASE)
# Statements whose body runs every time the statement itself does.
_STRAIGHT = (ast.With, ast.AsyncWith, ast.Try)


def src(ctx: FileContext, node: ast.AST) -> str:
    return ctx.locator.source(node)


def is_backward(ctx: FileContext, node: ast.AST) -> bool:
    """``loss.backward()``, ``accelerator.backward(loss)``, ``self.manual_backward(loss)``,
    ``torch.autograd.backward``."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    if node.func.attr == "manual_backward":
        return True
    if node.func.attr != "backward":
        return False
    qn = ctx.resolve(node.func)
    return qn is None or qn == "torch.autograd.backward"


def is_optimizer(ctx: FileContext, expr: ast.AST) -> bool:
    kinds = ctx.kinds(expr)
    if SCHEDULER in kinds or SCALER in kinds:
        return False
    if OPTIMIZER in kinds:
        return True
    name = expr.id if isinstance(expr, ast.Name) else expr.attr if isinstance(expr, ast.Attribute) else None
    if not kinds and name is not None and _OPTIMIZER_NAME.search(name):
        ctx.note(Evidence.UNRESOLVED, f"`{name}` is taken for an optimizer by its name")
        return True
    return False


def stepped_optimizer(ctx: FileContext, node: ast.AST) -> ast.expr | None:
    """The optimizer ``node`` steps: ``opt.step()`` or ``scaler.step(opt)`` (not ``opt.step(closure)``)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "step"):
        return None
    recv = node.func.value
    if not node.args and not node.keywords:
        return recv if is_optimizer(ctx, recv) else None
    if len(node.args) == 1 and not node.keywords:
        name = recv.id if isinstance(recv, ast.Name) else recv.attr if isinstance(recv, ast.Attribute) else ""
        if SCALER in ctx.kinds(recv):
            return node.args[0]
        if "scaler" in name.lower():
            ctx.note(Evidence.UNRESOLVED, f"`{name}` is taken for a GradScaler by its name")
            return node.args[0]
    return None


def zeroes_grads(ctx: FileContext, node: ast.AST) -> bool:
    """Any way of clearing gradients: ``zero_grad``, ``p.grad = ...``, ``del p.grad``, ``p.grad.zero_()``."""
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name == "zero_grad" or _ZERO_HELPER.search(name) or ctx.calls_project_function_that(node, ZERO_GRAD):
            return True
        if isinstance(func, ast.Attribute) and func.attr in ("zero_", "fill_", "mul_", "detach_", "requires_grad_"):
            return mentions_grad(func.value)
        return ctx.call_name(node) == "torch._foreach_zero_"
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(t, ast.Attribute) and t.attr == "grad" for t in targets)
    if isinstance(node, ast.Delete):
        return any(isinstance(t, ast.Attribute) and t.attr == "grad" for t in node.targets)
    return False


def local_callees(ctx: FileContext, call: ast.Call) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Functions of this file a call may run: ``f(...)`` or ``self.f(...)``."""
    func = call.func
    if isinstance(func, ast.Name):
        name = func.id
    elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ("self", "cls"):
        name = func.attr
    else:
        return []
    return ctx.functions.get(name, [])


def reaches(ctx: FileContext, root: ast.AST | list[ast.stmt], predicate, depth: int = 3) -> ast.AST | None:
    """The first node under ``root`` (not entering nested defs) matching ``predicate``, following calls
    into this file's functions. Returns the node in ``root`` (the call) when the match is in a callee."""
    seen: set[int] = set()

    def search(nodes, d) -> bool:
        for node in nodes:
            if predicate(node):
                return True
            if d < depth and isinstance(node, ast.Call):
                for fn in local_callees(ctx, node):
                    if id(fn) not in seen:
                        seen.add(id(fn))
                        if search(ctx.walk_scope(fn.body), d + 1):
                            return True
        return False

    for node in ctx.walk_scope(root):
        if predicate(node):
            return node
        if isinstance(node, ast.Call):
            for fn in local_callees(ctx, node):
                if id(fn) not in seen:
                    seen.add(id(fn))
                    if search(ctx.walk_scope(fn.body), 1):
                        return node
    return None


def unseen_helper(ctx: FileContext, body: list[ast.AST], texts: set[str]) -> ast.Call | None:
    """A call under ``body`` that is handed one of ``texts`` (the optimizer, the model) and runs code this
    file does not show: not a function of this file, not torch's, not a step or unscale of a scaler.
    A helper of another package may zero the gradients or call ``backward()`` there."""
    for node in ctx.walk_scope(body):
        if not isinstance(node, ast.Call) or local_callees(ctx, node):
            continue
        if (ctx.call_name(node) or "").startswith("torch."):
            continue
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("step", "unscale_", "update", "zero_grad"):
            continue
        if any(src(ctx, a) in texts for a in [*node.args, *(k.value for k in node.keywords)]):
            return node
    return None


def loop_nodes(loop: ast.AST) -> list[ast.AST]:
    """What runs every iteration: the body (and a while loop's test), not the else clause."""
    out: list[ast.AST] = list(loop.body)  # type: ignore[attr-defined]
    if isinstance(loop, ast.While):
        out.insert(0, loop.test)
    return out


def trains(ctx: FileContext, root) -> ast.AST | None:
    return reaches(ctx, root, lambda n: is_backward(ctx, n))


def innermost_training_loop(ctx: FileContext, node: ast.AST, same_model: bool = False) -> ast.AST | None:
    """The innermost loop around ``node`` whose iterations also call ``backward()``; with
    ``same_model``, on a module that is the same object in every iteration (a loop that builds or
    takes a new model in each iteration is skipped: what one iteration leaves in ``.grad`` or in the
    module's mode does not meet the next model)."""
    for loop in ctx.enclosing_loops(node):
        if trains(ctx, loop_nodes(loop)) is not None:
            if same_model and iterates_models(loop, ctx):
                continue
            return loop
    return None


def unconditional_in(ctx: FileContext, node: ast.AST, loop: ast.AST) -> bool:
    """Whether ``node`` runs on every iteration of ``loop`` (no branch or inner loop in between)."""
    stmt = ctx.statement(node)
    child: ast.AST | None = stmt
    for anc in ctx.ancestors(stmt):
        if anc is loop:
            return child in loop.body  # type: ignore[attr-defined]
        if isinstance(anc, _STRAIGHT):
            if isinstance(anc, ast.Try) and child not in anc.body and child not in anc.finalbody:
                return False
        elif isinstance(anc, (ast.stmt, ast.excepthandler)):
            return False
        child = anc
    return False


def parameter_owners(ctx: FileContext, optimizer: ast.AST) -> set[str]:
    """Texts of ``X`` in ``X.parameters()`` given to the constructor(s) bound to ``optimizer``."""
    owners: set[str] = set()
    for value in ctx.values(optimizer):
        if not isinstance(value, ast.Call):
            continue
        params = value.args[0] if value.args else keyword(value, "params")
        if params is None:
            continue
        for node in ast.walk(params):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("parameters", "named_parameters")):
                owners.add(src(ctx, node.func.value))
    return owners


# ------------------------------------------------------------------------------------ train / eval
_RETURNS_SELF = frozenset({"to", "cuda", "cpu", "float", "double", "half", "bfloat16", "eval", "train",
                           "requires_grad_", "to_empty", "share_memory"})


def mode_switch(ctx: FileContext, node: ast.AST) -> tuple[str, ast.expr] | None:
    """('eval' | 'train', module) for ``m.eval()``, ``m.train()``, ``m.train(False)``, ``m.train(mode=x)``."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    attr = node.func.attr
    recv = node.func.value
    if ctx.resolve(node.func) is not None:
        return None
    # Module methods that move or cast in place return the module itself: `m.to(d).train()` switches `m`.
    while (isinstance(recv, ast.Call) and isinstance(recv.func, ast.Attribute)
           and recv.func.attr in _RETURNS_SELF and ctx.resolve(recv.func) is None):
        recv = recv.func.value
    if attr == "eval" and not node.args and not node.keywords:
        return "eval", recv
    if attr == "train" and len(node.args) + len(node.keywords) <= 1:
        arg = node.args[0] if node.args else keyword(node, "mode")
        if arg is not None and is_const(arg, False):
            return "eval", recv
        return "train", recv
    return None


def mode_events(ctx: FileContext, root, depth: int = 2) -> Iterator[tuple[str, str, ast.AST]]:
    """(mode, module text, node in ``root``) for every mode switch under ``root``, following calls to
    this file's functions (a parameter is mapped to the argument the call passes)."""
    for node in ctx.walk_scope(root):
        found = mode_switch(ctx, node)
        if found is not None:
            yield found[0], src(ctx, found[1]), node
            continue
        if depth and isinstance(node, ast.Call):
            for fn in local_callees(ctx, node):
                mapping = _argument_map(ctx, fn, node)
                for mode, text, _ in mode_events(ctx, fn.body, depth - 1):
                    yield mode, mapping.get(text, text), node


def _argument_map(ctx: FileContext, fn: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call) -> dict[str, str]:
    params = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
    if params and params[0] in ("self", "cls") and isinstance(call.func, ast.Attribute):
        params = params[1:]
    out: dict[str, str] = {}
    for name, arg in zip(params, call.args, strict=False):  # a call may pass fewer arguments, or more to *args
        if isinstance(arg, ast.Starred):
            break
        out[name] = src(ctx, arg)
    for kw in call.keywords:
        if kw.arg:
            out[kw.arg] = src(ctx, kw.value)
    # a parameter the call does not pass is unknown, not the global of the same name
    for name in [*params, *(a.arg for a in fn.args.kwonlyargs)]:
        out.setdefault(name, f"<{name}>")
    return out
