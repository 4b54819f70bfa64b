from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import SCHEDULER, FileContext, argument, keyword
from torchpact.lint.rule import Hit, Rule

PLATEAU = "torch.optim.lr_scheduler.ReduceLROnPlateau"


class SchedulerStepWithEpoch(Rule):
    """`scheduler.step(epoch)` passes the deprecated `epoch` argument.

    ## What it does
    Flags `scheduler.step(e)` / `scheduler.step(epoch=e)` on a `torch.optim.lr_scheduler`
    scheduler (not `ReduceLROnPlateau`, whose argument is the metric).

    ## Why is this bad?
    On torch 2.13 it warns `The epoch parameter in scheduler.step() was not necessary and is being
    deprecated`. What the epoch does depends on the scheduler: those with a closed form
    (`StepLR`, `MultiStepLR`, ...) jump to it, but recursive ones apply one more step whatever the
    epoch says — on torch 2.13 `MultiplicativeLR(opt, lambda e: 0.5).step(5)` from the start gives
    lr `0.5`, not `0.5**5`, and calling `step(1)` three times halves it three times. Code that
    passes `epoch` to resume training can silently get another schedule.

    ## Fix safety
    No autofix: call `scheduler.step()` once per epoch (or step) and restore position with
    `scheduler.load_state_dict(...)` when resuming.
    """

    code = "TP412"
    category = Category.TRAINING
    severity = Severity.WARNING
    requires = (
        "the receiver is resolved to an lr scheduler (not `ReduceLROnPlateau`) through dataflow",
    )
    message = "`scheduler.step(epoch)` is deprecated (it warns on torch 2.13) and can skew the schedule"
    fix_hint = "call `scheduler.step()` with no argument; restore a resumed schedule with `load_state_dict`"
    nodes = (ast.Call,)
    calls = frozenset({"step"})
    triggers = ("step(",)

    valid = ["""
import torch
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 10)
plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
for epoch in range(10):
    scheduler.step()
    plateau.step(val_loss)
    optimizer.step(closure)
"""]
    invalid = ["""
import torch
scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, [30, 60])
for epoch in range(start_epoch, 90):
    train(epoch)
    scheduler.step(epoch)
"""]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr == "step"):
            return
        if argument(node, "epoch", 0) is None or any(isinstance(a, ast.Starred) for a in node.args):
            return
        values = [v for _, v in ctx.bindings(func.value)]
        constructors = [ctx.call_name(v) for v in values if isinstance(v, ast.Call)]
        if not constructors or len(constructors) != len(values):
            return
        if all((c or "").startswith("torch.optim.lr_scheduler.") and c != PLATEAU for c in constructors):
            if SCHEDULER in ctx.kinds(func.value) and keyword(node, "metrics") is None:
                yield self.hit(node, subject=ctx.locator.source(func.value))
