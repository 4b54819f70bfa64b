from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import FileContext, keyword
from torchpact.lint.rule import Hit, Rule


class SchedulerVerboseArgument(Rule):
    """An `lr_scheduler` is constructed with `verbose=`, which torch 2.13 no longer accepts.

    ## What it does
    Flags `torch.optim.lr_scheduler.*(..., verbose=...)`.

    ## Why is this bad?
    `verbose` was deprecated in torch 2.2 and has been removed: on torch 2.13 every scheduler
    raises `TypeError: ... __init__() got an unexpected keyword argument 'verbose'` at
    construction, so the script stops before training.

    ## Fix safety
    No autofix (removing the argument is safe, but the logging it gave is gone): log
    `scheduler.get_last_lr()` yourself where you want to see the learning rate.
    """

    code = "TP411"
    category = Category.TRAINING
    severity = Severity.ERROR
    message = "`verbose=` was removed from the lr schedulers: the constructor raises TypeError on torch 2.13"
    fix_hint = "drop `verbose=` and log `scheduler.get_last_lr()` where needed"
    nodes = (ast.Call,)
    triggers = ("verbose",)
    requires = ("the constructor resolves to a `torch.optim.lr_scheduler` class through the file's imports",)

    valid = ["""
import torch
sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=3)
trainer = Trainer(verbose=True)
"""]
    invalid = ["""
from torch.optim import lr_scheduler
sched = lr_scheduler.ReduceLROnPlateau(opt, mode="min", patience=3, verbose=True)
"""]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        qn = ctx.call_name(node) or ""
        if qn.startswith("torch.optim.lr_scheduler.") and keyword(node, "verbose") is not None:
            yield self.hit(node, subject=qn, evidence=Evidence.MUST)
