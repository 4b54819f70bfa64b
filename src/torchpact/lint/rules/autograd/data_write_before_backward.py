from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, keyword
from torchpact.lint.rule import Hit, Rule
from torchpact.lint.rules.autograd._util import PARAMETER_ITERATORS, inplace_method, pos, scope_body

BACKWARD_FUNCTIONS = {"torch.autograd.backward", "torch.autograd.grad"}


class DataWriteBeforeBackward(Rule):
    """A tensor is overwritten through `.data` after the forward pass and before its `backward()`.

    ## What it does
    Flags writes through `.data` — `p.data.clamp_(...)`, `w.data.mul_(2)`, `w.data = ...`,
    `w.data[...] = ...`, `w.data += ...` — that sit, in one function, after the statement that
    computes a loss and before `loss.backward()` (or `scaler.scale(loss).backward()`,
    `torch.autograd.grad(loss, ...)`), when the written tensor belongs to what the loss was computed
    from (a name, or `model.parameters()` of a model, used in computing it). `.data` writes in
    initialisation code (`module.weight.data.normal_()`), before the forward, or after `backward()`
    (weight clipping after `optimizer.step()`) are not flagged: no graph is alive there.

    ## Why is this bad?
    A write through `.data` is invisible to autograd: it does not bump the version counter that
    protects tensors saved for backward. On torch 2.13, with `y = (w * x).sum()`, then
    `w.data.mul_(2)` (or `w.data = w.data * 2`), `y.backward()` raises nothing and gives
    `x.grad == 2 * w_old` — the gradient is computed from the *new* weights while the loss came from
    the old ones. The same change made visibly (`with torch.no_grad(): w.mul_(2)`, or through
    `w.detach()`) makes backward raise `RuntimeError: one of the variables needed for gradient
    computation has been modified by an inplace operation: [torch.FloatTensor [2]] is at version 1;
    expected version 0 instead.` — `.data` only removes the error, not the bug. It is a warning,
    not an error, because whether the forward saved this particular tensor (a weight usually is;
    a bias added last is not) is not visible in the source.

    ## Fix safety
    No autofix: move the write after `backward()` (typically after `optimizer.step()`, as weight
    clipping should be) or before the forward, and prefer `with torch.no_grad(): p.clamp_(...)`
    over `.data`, so that a misplaced write raises instead of silently corrupting gradients.
    """

    code = "TP201"
    category = Category.AUTOGRAD
    severity = Severity.WARNING
    requires = (
        "the `.data` write comes after the loss is computed and before its `backward()` in the same function",
        "the written tensor is one the loss was computed from",
    )
    facts = ("data-write-changes-backward",)
    message = ("write through `.data` between a forward pass and its backward: autograd does not see it, so "
               "backward silently uses the new values and the gradients no longer match the loss")
    fix_hint = ("move the write after `backward()` / `optimizer.step()` (or before the forward), "
                "under `torch.no_grad()` instead of `.data`")
    nodes = (ast.Call, ast.Assign, ast.AugAssign)
    triggers = (".data",)

    valid = [
        """
import torch
for x in loader:
    loss = -critic(x).mean()
    loss.backward()
    optimizer.step()
    for p in critic.parameters():
        p.data.clamp_(-0.01, 0.01)
""",
        """
import torch.nn as nn

def init_weights(module):
    if isinstance(module, nn.Linear):
        module.weight.data.normal_(mean=0.0, std=0.02)
        module.bias.data.zero_()
""",
        """
import torch

def train(model, ema, loader, optimizer):
    for x, y in loader:
        for p in model.parameters():
            p.data.clamp_(-1, 1)
        loss = criterion(model(x), y)
        for e in ema.parameters():
            e.data.mul_(0.999)
        loss.backward()
        optimizer.step()
""",
    ]
    invalid = [
        """
import torch
for x in loader:
    loss = -critic(x).mean()
    for p in critic.parameters():
        p.data.clamp_(-0.01, 0.01)
    loss.backward()
    optimizer.step()
""",
        """
import torch
w = torch.randn(3, requires_grad=True)
y = (w * x).sum()
w.data = w.data * 0.5
y.backward()
""",
        """
import torch.nn.functional as F

def step(model, x, y, optimizer, scaler):
    out = model(x)
    loss = F.mse_loss(out, y)
    model.fc.weight.data.mul_(0.9)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        written = _data_write(node)
        if written is None:
            return
        owner = self._owner_text(ctx, written)
        if owner is None:
            return
        scope = ctx.scope(node)
        nodes = list(ctx.walk_scope(scope_body(scope)))
        here = pos(node)
        for loss, call in _backward_targets(ctx, nodes):
            if pos(call) <= here or ctx.grad_disabled(call):
                continue
            stores = [pos(n) for n in nodes
                      if isinstance(n, ast.Name) and n.id == loss and isinstance(n.ctx, ast.Store)]
            if not any(p < here for p in stores) or any(here < p < pos(call) for p in stores):
                continue  # the loss is not computed before the write, or is recomputed after it
            if _related(owner, self._forward_names(ctx, nodes, loss, here)):
                yield self.hit(node, subject=ctx.segment(written))
                return

    @staticmethod
    def _owner_text(ctx: FileContext, written: ast.AST) -> str | None:
        """What the written tensor belongs to, as text: ``model`` for a parameter of ``model``."""
        if isinstance(written, ast.Name):
            for owner, _ in ctx.bindings(written):
                if isinstance(owner, (ast.For, ast.AsyncFor)) and _binds_param(owner, written.id):
                    return ctx.segment(owner.iter.func.value)  # type: ignore[attr-defined]
            return written.id
        return ctx.segment(written) if isinstance(written, ast.Attribute) else None

    @staticmethod
    def _forward_names(ctx: FileContext, nodes: list[ast.AST], loss: str, before: tuple[int, int]) -> set[str]:
        """Names and attribute chains the loss was computed from (transitively, before the write)."""
        seen: set[str] = set()
        todo = [loss]
        assigns = [n for n in nodes if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and pos(n) < before]
        while todo:
            name = todo.pop()
            for a in assigns:
                targets = a.targets if isinstance(a, ast.Assign) else [a.target]
                if not any(isinstance(t, ast.Name) and t.id == name or
                           isinstance(t, (ast.Tuple, ast.List))
                           and any(isinstance(e, ast.Name) and e.id == name for e in t.elts)
                           for t in targets):
                    continue
                for sub in ast.walk(a.value) if a.value is not None else ():
                    if isinstance(sub, ast.Attribute):
                        seen.add(ctx.segment(sub))
                    elif isinstance(sub, ast.Name) and sub.id not in seen:
                        seen.add(sub.id)
                        todo.append(sub.id)
        return seen


def _related(owner: str, used: set[str]) -> bool:
    """``model.fc.weight`` belongs to ``model`` / ``model.fc``; ``model``'s parameters feed ``model.fc(x)``.
    A bare ``self`` relates nothing: every method touches ``self``."""
    for u in used:
        if u == "self" or owner == "self":
            continue
        if u == owner or owner.startswith(u + ".") or u.startswith(owner + "."):
            return True
    return False


def _binds_param(loop: ast.For | ast.AsyncFor, name: str) -> bool:
    it = loop.iter
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in PARAMETER_ITERATORS):
        return False
    t = loop.target
    return (isinstance(t, ast.Name) and t.id == name) or (
        isinstance(t, ast.Tuple) and len(t.elts) == 2 and isinstance(t.elts[1], ast.Name) and t.elts[1].id == name)


def _data_write(node: ast.AST) -> ast.AST | None:
    """The tensor written through ``.data`` by this node (``w`` for ``w.data.mul_(2)``), else None."""
    def through_data(expr: ast.AST) -> ast.AST | None:
        if isinstance(expr, ast.Subscript):
            expr = expr.value
        if isinstance(expr, ast.Attribute) and expr.attr == "data":
            return expr.value
        return None

    if isinstance(node, ast.Call) and inplace_method(node):
        return through_data(node.func.value)  # type: ignore[attr-defined]
    if isinstance(node, ast.AugAssign):
        return through_data(node.target)
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        return through_data(node.targets[0])
    return None


def _backward_targets(ctx: FileContext, nodes: list[ast.AST]) -> Iterator[tuple[str, ast.Call]]:
    """(loss name, call) for every backward in the scope."""
    for n in nodes:
        if not isinstance(n, ast.Call):
            continue
        target: ast.AST | None = None
        if ctx.call_name(n) in BACKWARD_FUNCTIONS:
            target = n.args[0] if n.args else keyword(n, "tensors") or keyword(n, "outputs")
        elif isinstance(n.func, ast.Attribute) and n.func.attr == "backward":
            target = n.func.value
            if n.args and isinstance(n.args[0], ast.Name) and _is_wrapper(target):
                target = n.args[0]  # accelerator.backward(loss)
        if (isinstance(target, ast.Call) and isinstance(target.func, ast.Attribute)
                and target.func.attr == "scale" and target.args):
            target = target.args[0]
        if isinstance(target, ast.Name):
            yield target.id, n


def _is_wrapper(expr: ast.AST) -> bool:
    name = expr.id if isinstance(expr, ast.Name) else expr.attr if isinstance(expr, ast.Attribute) else ""
    return any(w in name.lower() for w in ("accelerator", "fabric", "engine", "strategy"))
