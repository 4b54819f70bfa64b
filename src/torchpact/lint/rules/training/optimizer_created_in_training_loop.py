from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, argument, is_const
from torchpact.lint.rule import Hit, Rule
from torchpact.lint.rules.numerics._util import is_backward_call


def _is_optimizer_class(qn: str | None) -> bool:
    return bool(qn and qn.startswith("torch.optim.") and not qn.startswith("torch.optim.lr_scheduler.")
                and qn.rsplit(".", 1)[-1][:1].isupper())


def _stateless(call: ast.Call, ctx: FileContext) -> bool:
    """Plain SGD without momentum (torch.optim.SGD(params, lr, momentum=0, ...)): ``step`` keeps no state."""
    if ctx.call_name(call) != "torch.optim.SGD" or any(isinstance(a, ast.Starred) for a in call.args):
        return False
    if any(k.arg is None for k in call.keywords):
        return False  # ``**config`` may hold a momentum
    momentum = argument(call, "momentum", 2)
    if momentum is not None and not _zero(momentum):
        return False
    params = argument(call, "params", 0)
    for group in ast.walk(params) if params is not None else ():
        if isinstance(group, ast.Dict) and any(k is None for k in group.keys):
            return False  # ``{**group}`` may hold a momentum
        if isinstance(group, ast.Dict):
            for key, value in zip(group.keys, group.values):
                if is_const(key, "momentum") and not _zero(value):
                    return False
    return True


def _zero(value: ast.AST) -> bool:
    return isinstance(value, ast.Constant) and not isinstance(value.value, bool) and value.value == 0


class OptimizerCreatedInTrainingLoop(Rule):
    """An optimizer is constructed inside the training loop, so its state restarts at every step.

    ## What it does
    Flags a `torch.optim.*` optimizer constructed inside a loop whose body (the same innermost
    loop) also calls `backward()` and steps that optimizer.

    The condition it needs: the optimizer keeps state from one step to the next, which re-creating
    it throws away. Every torch optimizer does (Adam's moments, RMSprop's averages, Adagrad's sums,
    LBFGS's history) except plain SGD: with `momentum=0` — its default, by keyword or third
    positional argument, and in no parameter group — `SGD.step` keeps nothing in `optimizer.state`,
    so a new one each iteration takes exactly the steps one long-lived one would (the proof compares
    the parameters bit for bit), and it is not flagged. An SGD whose momentum is not a literal 0 is.

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
""", """
import torch
for inputs, targets in batches:
    plain = torch.optim.SGD(net.parameters(), lr=0.05)
    plain.zero_grad()
    crit(net(inputs), targets).backward()
    plain.step()
""", """
import torch
step = 0
while step < 50:
    sgd = torch.optim.SGD(net.parameters(), 0.1, 0.0, weight_decay=1e-4)
    sgd.zero_grad()
    crit(net(inputs), targets).backward()
    sgd.step()
    step += 1
""", """
from torch import optim
def inner_loop(learner, tasks):
    for task in tasks:
        fast = optim.SGD([{"params": learner.head.parameters(), "lr": 0.4}], lr=0.1, momentum=0)
        fast.zero_grad()
        learner.loss(task).backward()
        fast.step()
""", """
import torch
def fit(net, loader, lr):
    for xb, yb in loader:
        if lr_changed():
            lr = new_lr()
        opt = torch.optim.SGD(params=net.parameters(), lr=lr, nesterov=False)
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(xb), yb).backward()
        opt.step()
""", """
import torch.optim as optim
for k, batch in enumerate(stream):
    refresher = optim.SGD(model.parameters(), lr=1e-2, momentum=0, dampening=0)
    refresher.zero_grad()
    model(batch).sum().backward()
    refresher.step()
"""]
    invalid = ["""
import torch
for x, y in loader:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
""", """
import torch
for inputs, targets in batches:
    heavy = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    heavy.zero_grad()
    crit(net(inputs), targets).backward()
    heavy.step()
""", """
import torch
step = 0
while step < 50:
    sgd = torch.optim.SGD(net.parameters(), 0.1, 0.9)
    sgd.zero_grad()
    crit(net(inputs), targets).backward()
    sgd.step()
    step += 1
""", """
from torch import optim
def inner_loop(learner, tasks):
    for task in tasks:
        fast = optim.SGD([{"params": learner.head.parameters(), "momentum": 0.5}], lr=0.1)
        fast.zero_grad()
        learner.loss(task).backward()
        fast.step()
""", """
import torch
def fit(net, loader, cfg):
    for xb, yb in loader:
        opt = torch.optim.SGD(net.parameters(), lr=cfg.lr, momentum=cfg.momentum)
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(xb), yb).backward()
        opt.step()
""", """
import torch.optim as optim
for k, batch in enumerate(stream):
    refresher = optim.Adagrad(model.parameters(), lr=1e-2)
    refresher.zero_grad()
    model(batch).sum().backward()
    refresher.step()
"""]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if not _is_optimizer_class(ctx.call_name(node)) or _stateless(node, ctx):
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
