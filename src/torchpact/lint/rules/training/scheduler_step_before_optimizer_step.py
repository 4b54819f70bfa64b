from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import OPTIMIZER, SCHEDULER, FileContext
from torchpact.lint.rule import Invalid, Hit, Rule

PLATEAU = "torch.optim.lr_scheduler.ReduceLROnPlateau"


def _step_of(ctx: FileContext, node: ast.AST, kind: str) -> bool:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "step"):
        return False
    kinds = ctx.kinds(node.func.value)
    other = SCHEDULER if kind == OPTIMIZER else OPTIMIZER
    return kind in kinds and other not in kinds


class SchedulerStepBeforeOptimizerStep(Rule):
    """`scheduler.step()` runs before the first `optimizer.step()` of its loop, skipping the first learning rate.

    ## What it does
    Flags `scheduler.step()` inside a loop when an `optimizer.step()` comes later in the same loop
    (directly or in a nested loop) and none comes before it — e.g. an epoch loop that steps the
    scheduler first and then trains. `ReduceLROnPlateau` is not judged.

    ## Why is this bad?
    Since torch 1.1 the scheduler sets the learning rate for the *next* optimizer step. Stepped
    first, it moves past its initial value before any update used it: on torch 2.13 a
    `LambdaLR` with factors `[1, .5, .25]` trains with `.5, .25, ...` — the first value (often
    the end of a warmup, or the base lr) is never used, and every later epoch runs one step
    ahead of the intended schedule. torch warns `Detected call of lr_scheduler.step() before
    optimizer.step()` once.

    ## Fix safety
    No autofix: move `scheduler.step()` after the optimizer steps it should follow (end of the
    epoch for epoch schedulers, after `optimizer.step()` for per-step ones).
    """

    code = "TP420"
    category = Category.TRAINING
    severity = Severity.WARNING
    requires = (
        "the receivers are resolved to a scheduler and an optimizer through dataflow",
        "in the loop, the scheduler's step comes before any optimizer step",
    )
    message = "`scheduler.step()` runs before `optimizer.step()`: the schedule's first learning rate is skipped"
    fix_hint = "call `scheduler.step()` after `optimizer.step()` (at the end of the epoch for epoch schedules)"
    nodes = (ast.Call,)
    calls = frozenset({"step"})
    triggers = ("lr_scheduler", "scheduler")

    valid = ["""
import torch
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 30)
for epoch in range(90):
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    scheduler.step()
""", """
import torch
plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
for epoch in range(10):
    plateau.step(val_loss)
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
"""]
    invalid = [Invalid("""
import torch
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 30)
for epoch in range(90):
    scheduler.step()
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
""", severity=Severity.INFO)]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        if not _step_of(ctx, node, SCHEDULER):
            return
        recv = node.func.value  # type: ignore[attr-defined]
        if any(isinstance(v, ast.Call) and ctx.call_name(v) == PLATEAU for _, v in ctx.bindings(recv)):
            return
        if node.args or node.keywords:
            return  # step(metric) / step(epoch): another rule's business
        loops = ctx.enclosing_loops(node)
        if not loops:
            return
        loop = loops[0]
        steps = [n for n in ctx.walk_scope(loop.body) if _step_of(ctx, n, OPTIMIZER)]
        if steps and all((s.lineno, s.col_offset) > (node.lineno, node.col_offset) for s in steps):
            yield self.hit(node, subject=ctx.locator.source(recv))
