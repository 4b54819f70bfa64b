from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, keyword
from torchpact.lint.rule import Hit, Rule, last_names

VARIABLE = {"torch.autograd.Variable", "torch.autograd.variable.Variable"}


class VariableVolatile(Rule):
    """`Variable(x, volatile=True)` is used to turn off gradients; `volatile` has no effect since torch 0.4.

    ## What it does
    Flags `Variable(..., volatile=...)` calls and reads or writes of a `.volatile` attribute in
    files that import `torch.autograd.Variable`.

    ## Why is this bad?
    On torch 2.13 `Variable(x, volatile=True)` warns `volatile was removed and now has no effect.
    Use with torch.no_grad(): instead.` and returns `x` itself: the evaluation code that relied on
    it records the autograd graph of every forward pass, keeping all activations alive (the memory
    of training, at inference time).

    ## Fix safety
    No autofix: the replacement is a `with torch.no_grad():` block around the forward pass, which
    is a structural change.
    """

    code = "TP214"
    category = Category.AUTOGRAD
    severity = Severity.WARNING
    requires = (
        "the file imports `torch.autograd.Variable`",
    )
    message = "`volatile` has no effect since torch 0.4: the graph is still recorded and activations kept"
    fix_hint = "wrap the forward pass in `with torch.no_grad():` (or `torch.inference_mode()`) and drop `Variable`"
    nodes = (ast.Call,)
    calls = last_names(VARIABLE)
    triggers = ("volatile",)

    valid = ["""
import torch
from torch.autograd import Variable
x = Variable(images)
with torch.no_grad():
    out = model(images)
"""]
    invalid = ["""
import torch
from torch.autograd import Variable
inputs = Variable(images.cuda(), volatile=True)
out = model(inputs)
"""]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if ctx.call_name(node) in VARIABLE and keyword(node, "volatile") is not None:
            yield self.hit(node)
