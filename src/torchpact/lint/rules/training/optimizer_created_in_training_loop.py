from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Hit, Rule
from torchpact.lint.rules.numerics._util import is_backward_call


def _is_optimizer_class(qn: str | None) -> bool:
    return bool(qn and qn.startswith("torch.optim.") and not qn.startswith("torch.optim.lr_scheduler.")
                and qn.rsplit(".", 1)[-1][:1].isupper())


class OptimizerCreatedInTrainingLoop(Rule):
    """An optimizer is constructed inside the training loop, so its state restarts at every step.

    ## What it does
    Flags a `torch.optim.*` optimizer constructed inside a loop whose body (the same innermost
    loop) also calls `backward()` and steps that optimizer.

    ## Why is this bad?
    The optimizer's state — Adam's moment estimates and step count, SGD's momentum buffer — lives
    in the optimizer object. Re-creating it every iteration throws that state away: on torch 2.13
    Adam then takes a full `lr`-sized sign step each iteration (its bias-corrected first step),
    momentum never builds up, and a scheduler attached to the old optimizer no longer affects
    training.

    ## Fix safety
    No autofix: move the construction before the loop (and the scheduler with it).
    """

    code = "TP460"  # shared with the run check of the same pattern (watch/watchers)
    category = Category.TRAINING
    severity = Severity.WARNING
    requires = (
        "the optimizer is built by a resolved `torch.optim` class inside a loop that back-propagates and "
        "steps it",
    )
    message = "the optimizer is re-created on every training iteration: its momentum / Adam state is reset each step"
    fix_hint = "construct the optimizer once, before the training loop"
    nodes = (ast.Call,)
    triggers = ("optim",)

    valid = ["""
import torch
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for x, y in loader:
    optimizer.zero_grad()
    loss_fn(model(x), y).backward()
    optimizer.step()
""", """
import torch
for lr in [1e-3, 1e-4]:
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
""", """
import torch
for step in range(100):
    lam = torch.tensor(1.0, requires_grad=True)
    opt_lam = torch.optim.RMSprop([lam], lr=0.01)
    loss = (lam * constraint(model(x))).sum()
    loss.backward()
    opt_lam.step()
"""]
    invalid = ["""
import torch
for x, y in loader:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
"""]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if not _is_optimizer_class(ctx.call_name(node)):
            return
        loops = ctx.enclosing_loops(node)
        if not loops:
            return
        stmt = ctx.statement(node)
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            return
        name = stmt.targets[0].id
        loop = loops[0]
        body = list(ctx.walk_scope(loop.body))
        steps = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "step"
                    and isinstance(n.func.value, ast.Name) and n.func.value.id == name
                    and ctx.enclosing_loops(n)[:1] == [loop] for n in body)
        backward = any(is_backward_call(ctx, n) and ctx.enclosing_loops(n)[:1] == [loop] for n in body)
        if steps and backward and not self._params_recreated(node, body, ctx):
            yield self.hit(node, subject=name)

    @staticmethod
    def _params_recreated(call: ast.Call, body: list[ast.AST], ctx: FileContext) -> bool:
        """Whether the loop also re-creates what the optimizer is given: then no state could carry over."""
        params = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "params"), None)
        if params is None:
            return False
        used = {ctx.locator.source(n) for n in ast.walk(params) if isinstance(n, (ast.Name, ast.Attribute))}
        for n in body:
            if isinstance(n, ast.Assign) and n.lineno < call.lineno:
                if any(ctx.locator.source(t) in used for t in n.targets):
                    return True
        return False
