from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules.training._util import (
    innermost_training_loop,
    is_backward,
    local_callees,
    loop_nodes,
    parameter_owners,
    reaches,
    src,
    stepped_optimizer,
    unconditional_in,
    unseen_helper,
)


class StepBeforeBackward(Rule):
    """`optimizer.step()` runs after `zero_grad()` and before any `backward()` in the loop.

    ## What it does
    In a training loop, follows the statements backwards from `optimizer.step()` (or
    `scaler.step(optimizer)`), wrapping around to the end of the loop body (the previous
    iteration). Flags the step when it meets an unconditional `optimizer.zero_grad()` (or
    `model.zero_grad()` for the model the optimizer updates) before any `backward()` — the orders
    `zero_grad(); step(); backward()` and `backward(); zero_grad(); step()`. The rotated order
    `step(); zero_grad(); backward()` (which steps on the previous iteration's gradients) and
    accumulation that steps every k iterations are not flagged. A `backward()` inside a helper
    function of the same file counts.

    ## Why is this bad?
    `step()` uses whatever is in `.grad` at that moment. Right after `zero_grad()` (which on torch
    2.13 sets `.grad = None` by default) there is nothing: the optimizer skips every parameter, and
    on torch 2.13 five such iterations leave an SGD or AdamW model bit-for-bit unchanged — the loss
    curve stays flat while everything runs without error. With `zero_grad(set_to_none=False)` the
    gradients are zeros: SGD still does nothing, and AdamW's weight decay shrinks the weights
    towards zero, which is not what the loss asked for either.

    ## Fix safety
    No autofix: reorder the loop to `optimizer.zero_grad()`, forward, `loss.backward()`,
    `optimizer.step()`.
    """

    code = "TP404"
    category = Category.TRAINING
    severity = Severity.ERROR
    facts = ("zero-grad-sets-grads-to-none",)
    message = ("optimizer.step() runs after zero_grad() and before backward(): it sees no gradients, so "
               "the parameters are never updated by the loss")
    fix_hint = "order the loop as zero_grad(), forward, loss.backward(), optimizer.step()"
    nodes = (ast.Call,)
    calls = frozenset({"step"})
    triggers = ("step",)
    requires = (
        "the stepped value is resolved to a `torch.optim` optimizer (or handed to a resolved GradScaler's `step`)",
        "in the loop's order, an unconditional `zero_grad()` of the optimizer or its model comes between the last "
        "`backward()` and the step; no helper handed the model or optimizer runs unseen",
    )

    valid = [
        """
import torch
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
""",
        """
import torch
for x, y in loader:
    optimizer.step()       # applies the previous iteration's gradients
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
""",
        """
import torch
for i, (x, y) in enumerate(loader):
    if i > 0 and i % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    scaler.scale(model(x, y) / accum).backward()
""",
        """
import torch
def backward_pass(loss):
    loss.backward()

for x, y in loader:
    d_opt.zero_grad()
    backward_pass(criterion(model(x), y))
    g_opt.zero_grad()
    d_opt.step()
""",
        """
import torch
loss.backward()
for opt in optimizers:
    opt.zero_grad()
    opt.step()
""",
    ]
    invalid = [
        Invalid("""
import torch
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    optimizer.step()
    loss.backward()
""", severity=Severity.INFO, evidence=Evidence.UNRESOLVED),  # `optimizer` by its name only
        Invalid("""
import torch
import torch.nn as nn
net = nn.Linear(4, 1)
sgd = torch.optim.SGD(net.parameters(), lr=0.1)
for x, y in loader:
    sgd.zero_grad()
    loss = nn.functional.mse_loss(net(x), y)
    sgd.step()
    loss.backward()
""", evidence=Evidence.MUST),
        Invalid("""
import torch
def train(model, loader, fused):
    opt = torch.optim.AdamW(model.parameters(), fused=True) if fused else create_optimizer(model)
    for x, y in loader:
        opt.zero_grad()
        opt.step()
        model(x, y).backward()
""", severity=Severity.WARNING, evidence=Evidence.MAY),
        Invalid("""
import torch
def train(model, loader, opt, scaler):
    opt = torch.optim.AdamW(model.parameters())
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(**batch).loss
        loss.backward()
        model.zero_grad(set_to_none=True)
        opt.step()
""", evidence=Evidence.MUST),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        optimizer = stepped_optimizer(ctx, node)
        if optimizer is None:
            return
        loop = innermost_training_loop(ctx, node)
        if loop is None:
            return
        text = src(ctx, optimizer)
        owners = parameter_owners(ctx, optimizer) | {text}
        events = _events(ctx, loop_nodes(loop), owners)
        index = next((i for i, (_, n) in enumerate(events) if n is node), None)
        if index is None:
            return
        # closest first: this iteration's earlier events, then the previous iteration's later ones
        for kind, event in reversed(events[index + 1:] + events[:index]):
            if kind == "backward":
                return
            if kind == "zero" and unconditional_in(ctx, event, loop):
                helper = unseen_helper(ctx, loop_nodes(loop), owners)
                if helper is not None:
                    ctx.note(Evidence.UNRESOLVED, f"`{src(ctx, helper.func)}` is handed the model or optimizer and is "
                                                  "defined where this file does not show: it may call backward()")
                yield self.hit(node, subject=text, end_node=node, evidence=Evidence.MUST)
                return


def _events(ctx: FileContext, body: list[ast.AST], owners: set[str]) -> list[tuple[str, ast.AST]]:
    """('backward' | 'zero' | 'step', node) in source order through one iteration."""
    out: list[tuple[str, ast.AST]] = []
    for node in ctx.walk_scope(body):
        if not isinstance(node, ast.Call):
            continue
        if is_backward(ctx, node) or (local_callees(ctx, node) and reaches(ctx, [node], lambda n: is_backward(ctx, n))):
            out.append(("backward", node))
        elif (isinstance(node.func, ast.Attribute) and node.func.attr == "zero_grad"
              and src(ctx, node.func.value) in owners):
            out.append(("zero", node))
        elif stepped_optimizer(ctx, node) is not None:
            out.append(("step", node))
    out.sort(key=lambda e: (e[1].lineno, e[1].col_offset))
    return out
