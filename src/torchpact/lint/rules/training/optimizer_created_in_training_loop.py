from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, argument, is_const
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules.memory._model_loops import iterates_models
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
            for key, value in zip(group.keys, group.values, strict=True):  # a dict display: one key per value
                if is_const(key, "momentum") and not _zero(value):
                    return False
    return True


def _zero(value: ast.AST) -> bool:
    return isinstance(value, ast.Constant) and not isinstance(value.value, bool) and value.value == 0


class OptimizerCreatedInTrainingLoop(Rule):
    """An optimizer is constructed inside the training loop (or the epoch loop around it), so its state restarts there.

    ## What it does
    Flags a `torch.optim.*` optimizer constructed inside a loop whose iterations also call
    `backward()` and step that optimizer: the loop that steps it (re-created every step), or a loop
    around that one — an epoch loop whose inner loop steps it, directly or through a function of
    this file it is handed to (`train_one_epoch(model, opt, loader)`): re-created every epoch.

    Not flagged where nothing could carry over from one iteration to the next: the iteration also
    gives the optimizer other parameters (a loop over models, over stages whose parameters differ,
    the parameters' owner re-bound in the loop), or resets the model first (`model.apply(init)`,
    `reset_parameters()`, `load_state_dict` — a fresh run per fold or trial), or restores the
    optimizer's state (`opt.load_state_dict(...)`). Re-created every epoch with settings taken from
    the epoch (`lr=lrs[epoch]`, a decayed `lr`) is a deliberate re-configuration that still drops
    the state: `info`.

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
        "steps it, itself or in a loop (or a function of this file) inside it",
        "the loop's iterations neither give it other parameters nor reset the model or the optimizer's state",
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
""", """
import torch
def reset_weights(m):
    if hasattr(m, "reset_parameters"):
        m.reset_parameters()
def cross_validate(model, folds, crit):
    for train_loader, val_loader in folds:
        model.apply(reset_weights)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for epoch in range(10):
            for x, y in train_loader:
                opt.zero_grad()
                crit(model(x), y).backward()
                opt.step()
""", """
import torch
def gradual_unfreeze(net, stages, loader):
    for stage in stages:
        params = stage.trainable_parameters(net)
        opt = torch.optim.AdamW(params, lr=3e-4)
        for x, y in loader:
            opt.zero_grad()
            net(x).sub(y).pow(2).mean().backward()
            opt.step()
""", """
import torch
import torch.nn as nn
zoo = {"small": nn.Linear(4, 1), "big": nn.Sequential(nn.Linear(4, 64), nn.Linear(64, 1))}
for tag, candidate in zoo.items():
    opt = torch.optim.Adam(candidate.parameters())
    for epoch in range(3):
        for x, y in loader:
            opt.zero_grad()
            (candidate(x) - y).pow(2).mean().backward()
            opt.step()
""", """
import torch
for epoch in range(20):
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * 0.9 ** epoch)
    for x, y in loader:
        opt.zero_grad()
        crit(model(x), y).backward()
        opt.step()
""", """
import torch
def resume(model, loader, saved):
    for epoch in range(5):
        opt = torch.optim.Adam(model.parameters())
        opt.load_state_dict(saved)
        for x in loader:
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
        saved = opt.state_dict()
""", """
import torch
def evaluate_each_epoch(model, loader, epochs):
    for epoch in range(epochs):
        probe = torch.optim.Adam(model.head.parameters())
        for x in loader:
            with torch.no_grad():
                model(x)
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
""", """
import torch
def train(model, loader, criterion, epochs):
    for epoch in range(epochs):
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for x, y in loader:
            opt.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            opt.step()
""", """
import torch
epoch = 0
while epoch < 30:
    heavy = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    for inputs, targets in batches:
        heavy.zero_grad()
        crit(net(inputs), targets).backward()
        heavy.step()
    epoch += 1
""", """
import torch
def train_one_epoch(model, optimizer, loader):
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
def main(model, loader):
    for epoch in range(10):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        train_one_epoch(model, optimizer, loader)
""", """
import torch
def fit(model, folds):
    for train_loader in folds:
        opt = torch.optim.RMSprop(model.parameters())
        for epoch in range(3):
            for x in train_loader:
                opt.zero_grad()
                model(x).mean().backward()
                opt.step()
""", Invalid("""
import torch
for epoch in range(20):
    lr = 1e-3 * 0.5 ** (epoch // 5)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for x, y in loader:
        opt.zero_grad()
        crit(model(x), y).backward()
        opt.step()
""", severity=Severity.INFO)]

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
        for loop in loops:  # innermost first: the first loop whose iterations step this optimizer
            body = list(ctx.walk_scope(loop.body))
            steps = [n for n in body if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                     and n.func.attr == "step" and isinstance(n.func.value, ast.Name) and n.func.value.id == name]
            trainers = [] if steps else [n for n in body if _trains_with(n, name, ctx)]
            if not steps and not trainers:
                continue
            if steps and not any(is_backward_call(ctx, n) for n in body):
                return
            if _state_restored(name, body):
                return
            if iterates_models(loop, ctx) or self._params_recreated(node, loop, body, ctx):
                return  # a new model (or new parameters) each iteration: no state could carry over
            if steps and all(ctx.enclosing_loops(n)[:1] == [loop] for n in steps):
                yield self.hit(node, subject=name)
                return
            per_iteration = _uses_loop_values(node, loop, ctx)
            yield self.hit(node, EPOCH_MESSAGE, subject=name,
                           severity=Severity.INFO if per_iteration else None)
            return

    @staticmethod
    def _params_recreated(call: ast.Call, loop: ast.AST, body: list[ast.AST], ctx: FileContext) -> bool:
        """Whether each iteration gives the optimizer other parameters: what it is given is re-bound in
        the loop before it (or is the loop's own item), so no state could carry over."""
        params = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "params"), None)
        if params is None:
            return False
        used = {ctx.locator.source(n) for n in ast.walk(params) if isinstance(n, (ast.Name, ast.Attribute))}
        if isinstance(loop, (ast.For, ast.AsyncFor)) and any(
                isinstance(t, ast.Name) and t.id in used for t in ast.walk(loop.target)):
            return True
        for n in body:
            if isinstance(n, ast.Assign) and n.lineno < call.lineno:
                if any(ctx.locator.source(t) in used for t in n.targets):
                    return True
            if isinstance(n, ast.Call) and n.lineno < call.lineno and _reinitialises(n, ctx):
                return True  # the model is reset too: each iteration is a fresh run (folds, trials)
        return False


_RESETS = frozenset({"apply", "reset_parameters", "load_state_dict", "init_weights", "_init_weights"})


def _reinitialises(call: ast.Call, ctx: FileContext) -> bool:
    """``model.apply(init)``, ``reset_parameters()``, ``load_state_dict(...)``, ``nn.init.*_(...)``."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in _RESETS:
        return True
    return (ctx.call_name(call) or "").startswith("torch.nn.init.")


def _state_restored(name: str, body: list[ast.AST]) -> bool:
    """``opt.load_state_dict(...)`` in the loop: the state is carried over on purpose."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "load_state_dict"
               and isinstance(n.func.value, ast.Name) and n.func.value.id == name for n in body)


def _trains_with(node: ast.AST, name: str, ctx: FileContext) -> bool:
    """``train_one_epoch(model, opt, loader)``: a function of this file handed the optimizer that steps it
    (``<its parameter>.step()``) in a loop and back-propagates."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        return False
    fns = ctx.functions.get(node.func.id, [])
    if len(fns) != 1:
        return False
    fn = fns[0]
    params = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
    passed = None
    for i, a in enumerate(node.args):
        if isinstance(a, ast.Starred):
            return False
        if isinstance(a, ast.Name) and a.id == name and i < len(params):
            passed = params[i]
    for kw in node.keywords:
        if isinstance(kw.value, ast.Name) and kw.value.id == name:
            passed = kw.arg
    if passed is None:
        return False
    inner = list(ctx.walk_scope(fn.body))
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "step"
               and isinstance(n.func.value, ast.Name) and n.func.value.id == passed and ctx.in_loop(n)
               for n in inner) and any(is_backward_call(ctx, n) for n in inner)


EPOCH_MESSAGE = ("the optimizer is re-created on every iteration of the loop around the training loop (each "
                 "epoch): its momentum / Adam state restarts there")


def _uses_loop_values(call: ast.Call, loop: ast.AST, ctx: FileContext) -> bool:
    """Whether the optimizer's settings come from the outer loop's iteration (``lr=lrs[epoch]``): a
    deliberate re-configuration each epoch, which still drops the state."""
    targets = {t.id for t in ast.walk(loop.target) if isinstance(t, ast.Name)} if isinstance(
        loop, (ast.For, ast.AsyncFor)) else set()
    for stmt in ctx.walk_scope(loop.body):  # type: ignore[attr-defined]
        if isinstance(stmt, (ast.Assign, ast.AugAssign)) and stmt.lineno < call.lineno:
            for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]):
                if isinstance(t, ast.Name):
                    targets.add(t.id)
    settings = [*call.args[1:], *(k.value for k in call.keywords if k.arg != "params")]
    return any(isinstance(n, ast.Name) and n.id in targets for s in settings for n in ast.walk(s))
