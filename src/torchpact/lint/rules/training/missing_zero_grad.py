from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules.training._util import (
    innermost_training_loop,
    loop_nodes,
    reaches,
    src,
    stepped_optimizer,
    unseen_helper,
    zeroes_grads,
)


class MissingZeroGrad(Rule):
    """A training loop calls `backward()` and `optimizer.step()` but never clears the gradients.

    ## What it does
    Flags `optimizer.step()` (or `scaler.step(optimizer)`) inside a loop that also calls
    `backward()` when nothing in that loop clears gradients: no `zero_grad()` on an optimizer or a
    model (any `set_to_none`), no `p.grad = None` / `del p.grad` / `p.grad.zero_()`, not even in a
    helper function of the same file that the loop calls. Gradient accumulation
    (`if (i + 1) % k == 0: optimizer.step(); optimizer.zero_grad()`) clears them in the loop and is
    not flagged. Loops that build a fresh optimizer each iteration are not flagged either, nor loops
    over models: when each iteration back-propagates through a module bound anew in it (a
    constructor, a factory, `copy.deepcopy`, an item of the models or configs it iterates), each
    model's `.grad` starts empty and receives one backward. Models iterated round-robin inside an
    epoch loop are the same objects every epoch: their gradients add up across epochs, and the epoch
    loop is flagged.

    ## Why is this bad?
    `backward()` adds into `.grad`; it never overwrites it. On torch 2.13, after two
    `loss.backward()` calls without clearing, `.grad` is exactly the sum of both steps' gradients,
    so step *n* applies the sum of all *n* gradients so far: the effective learning rate grows with
    every iteration and training diverges or oscillates, with no error.

    ## Fix safety
    No autofix: where the gradients should be cleared (every step, or every k steps when
    accumulating) is a decision the code must state. Call `optimizer.zero_grad()` after
    `optimizer.step()` (or before `backward()`).
    """

    code = "TP401"
    category = Category.TRAINING
    severity = Severity.ERROR
    facts = ("grads-accumulate-across-backward",)
    message = ("the training loop never clears gradients: backward() adds into .grad, so every step "
               "applies the sum of all gradients so far")
    fix_hint = "call optimizer.zero_grad() every iteration (after optimizer.step(), or before backward())"
    nodes = (ast.Call,)
    calls = frozenset({"step"})
    triggers = ("step",)
    requires = (
        "the stepped value is resolved to a `torch.optim` optimizer (or handed to a resolved GradScaler's `step`)",
        "the loop around the step calls `backward()` and nothing it runs, in this file or the project's "
        "linted helpers, clears the gradients; no helper that gets the optimizer runs unseen",
    )

    valid = [
        """
import torch
for x, y in loader:
    optimizer.zero_grad(set_to_none=True)
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
""",
        """
import torch
optimizer.zero_grad()
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y) / accum_steps
    loss.backward()
    if (i + 1) % accum_steps == 0:
        optimizer.step()
        model.zero_grad()
""",
        """
import torch
def clear(params):
    for p in params:
        p.grad = None

def train(model, optimizer, loader):
    for x, y in loader:
        model(x, y).backward()
        optimizer.step()
        clear(model.parameters())
""",
        """
import torch
for lr in (0.1, 0.01):
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    model(x).sum().backward()
    optimizer.step()
""",
        """
import torch
for x, y in loader:
    def closure():
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        return loss
    optimizer.step(closure)
""",
        """
import torch

def first_step_moves_weights(members, x, opt):
    for member in members:
        before = [p.detach().clone() for p in member.parameters()]
        member(x).sum().backward()
        opt.step()
        assert any(not torch.equal(b, p) for b, p in zip(before, member.parameters()))
""",
        """
import torch

def sweep(specs, batch, shared_opt):
    for name, spec in specs.items():
        head = build_head(spec)
        shared_opt.add_param_group({"params": head.parameters()})
        head(batch).mean().backward()
        shared_opt.step()
""",
    ]
    invalid = [
        Invalid("""
import torch
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
optimizer.zero_grad()
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
""", evidence=Evidence.MUST),
        Invalid("""
from torch import optim
def fit(net, loader, epochs):
    opt = optim.Adam(net.parameters())
    scaler = make_scaler()
    for epoch in range(epochs):
        opt.zero_grad()
        for x, y in loader:
            loss = net(x, y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
""", severity=Severity.INFO, evidence=Evidence.UNRESOLVED),  # `scaler` is a GradScaler by its name only
        Invalid("""
import torch
def fit(model, loader, optimizer):
    for x, y in loader:
        model(x, y).backward()
        optimizer.step()
""", severity=Severity.INFO, evidence=Evidence.UNRESOLVED),  # `optimizer` by its name only
        Invalid("""
import torch
def fit(model, loader, adam):
    opt = torch.optim.Adam(model.parameters()) if adam else make_optimizer(model)
    for x, y in loader:
        model(x, y).backward()
        opt.step()
""", severity=Severity.WARNING, evidence=Evidence.MAY),
        Invalid("""
import torch
from trainer_utils import after_step
def fit(model, loader):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        model(x, y).backward()
        opt.step()
        after_step(model, opt)
""", severity=Severity.INFO, evidence=Evidence.UNRESOLVED),  # after_step may zero the gradients
        Invalid("""
import torch

def train_ensemble(members, batch, opt, epochs):
    for epoch in range(epochs):
        for m in members:
            m(batch).sum().backward()
            opt.step()
""", severity=Severity.INFO, evidence=Evidence.UNRESOLVED),  # `opt` is an optimizer by its name only
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        optimizer = stepped_optimizer(ctx, node)
        if optimizer is None:
            return
        loop = innermost_training_loop(ctx, node, same_model=True)
        if loop is None:
            return
        body = loop_nodes(loop)
        if reaches(ctx, body, lambda n: zeroes_grads(ctx, n)) is not None:
            return
        if _rebound_in(ctx, optimizer, body):
            return  # a fresh optimizer (and usually model) every iteration
        if _zero_grad_passed_around(ctx):
            return  # e.g. registered as a step hook: it may run where we cannot see
        helper = unseen_helper(ctx, body, {src(ctx, optimizer)})
        if helper is not None:
            ctx.note(Evidence.UNRESOLVED, f"`{src(ctx, helper.func)}` gets the optimizer and is defined where this "
                                          "file does not show: it may clear the gradients")
        yield self.hit(node, subject=src(ctx, optimizer), evidence=Evidence.MUST)


def _zero_grad_passed_around(ctx: FileContext) -> bool:
    for node in ctx.nodes(ast.Attribute):
        if node.attr == "zero_grad":
            parent = ctx.parent(node)
            if not (isinstance(parent, ast.Call) and parent.func is node):
                return True
    return False


def _rebound_in(ctx: FileContext, optimizer: ast.AST, body: list[ast.AST]) -> bool:
    text = src(ctx, optimizer)
    for node in ctx.walk_scope(body):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.withitem)):
            targets = [node.target] if not isinstance(node, ast.withitem) else (
                [node.optional_vars] if node.optional_vars is not None else [])
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, (ast.Name, ast.Attribute)) and src(ctx, sub) == text:
                    return True
    # ``for opt in optimizers: ... opt.step()``: bound by the loop header
    loop_parent = ctx.parent(body[0]) if body else None
    if isinstance(loop_parent, (ast.For, ast.AsyncFor)):
        return any(isinstance(s, ast.Name) and s.id == text for s in ast.walk(loop_parent.target))
    return False
