from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import LOSS, MODULE, OPTIMIZER, SCALER, SCHEDULER, FileContext
from torchpact.lint.rule import Hit, Invalid, Rule

# method -> the kinds of receiver it is flagged on (by local dataflow or the usual names)
METHODS = {
    "zero_grad": {MODULE, OPTIMIZER},
    "step": {OPTIMIZER, SCHEDULER},
    "train": {MODULE},
    "eval": {MODULE},
    "backward": {LOSS},
    "update": {SCALER},
}


class MethodNotCalled(Rule):
    """A training-step method is named but not called (`model.eval`, `optimizer.zero_grad`): it does nothing.

    ## What it does
    Flags expression statements that only name `zero_grad`, `step`, `train`, `eval`, `backward` or
    `update` on a model, optimizer, scheduler, loss or scaler, without the parentheses.

    ## Why is this bad?
    `model.eval` on its own line evaluates to a bound method and throws it away; Python and torch
    2.13 accept it silently. The model stays in training mode (dropout on, BatchNorm statistics
    updated during evaluation), gradients are never cleared, or the optimizer never steps.

    ## Fix safety
    The fix adds `()`, which is what the line was written to do.
    """

    code = "TP416"
    category = Category.TRAINING
    severity = Severity.ERROR
    message = "the method is named but not called, so the line does nothing"
    fix_hint = "add `()` to call it"
    nodes = (ast.Expr,)
    triggers = ("zero_grad", "step", "train", "eval", "backward", "update")
    requires = ("the receiver is resolved to a module, optimizer, scheduler, loss or GradScaler through dataflow",)
    fixable = True
    unsafe_fix = True  # see Fix safety: applied only with --unsafe-fixes

    valid = ["""
import torch
model.eval()
optimizer.zero_grad()
loss.backward()
scheduler.step()
fn = model.train
"""]
    invalid = [Invalid("""
import torch
def evaluate(model, loader):
    model.eval
    for x, y in loader:
        print(model(x))

for x, y in loader:
    optimizer.zero_grad
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
""", fixed="""
import torch
def evaluate(model, loader):
    model.eval()
    for x, y in loader:
        print(model(x))

for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
""", count=2, severity=Severity.INFO, evidence=Evidence.UNRESOLVED),  # a model and an optimizer by their names only
        Invalid("""
import torch
import torch.nn as nn
net = nn.Linear(4, 2)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
net.train
opt.zero_grad
""", fixed="""
import torch
import torch.nn as nn
net = nn.Linear(4, 2)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
net.train()
opt.zero_grad()
""", count=2, evidence=Evidence.MUST),
        Invalid("""
import torch
import torch.nn as nn
def evaluate(checkpoint, loader):
    net = nn.Linear(4, 2) if checkpoint is None else restore(checkpoint)
    net.eval
    return [net(x) for x in loader]
""", fixed="""
import torch
import torch.nn as nn
def evaluate(checkpoint, loader):
    net = nn.Linear(4, 2) if checkpoint is None else restore(checkpoint)
    net.eval()
    return [net(x) for x in loader]
""", severity=Severity.WARNING, evidence=Evidence.MAY)]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Expr)
        value = node.value
        if not (isinstance(value, ast.Attribute) and value.attr in METHODS):
            return
        if ctx.resolve(value) is not None:
            return  # a module attribute such as `torch.backward`, not a method of a value
        if ctx.kinds(value.value) & METHODS[value.attr]:
            yield self.hit(value, subject=ctx.locator.source(value),
                           edits=[ctx.locator.insert_after(value, "()")], evidence=Evidence.MUST)
