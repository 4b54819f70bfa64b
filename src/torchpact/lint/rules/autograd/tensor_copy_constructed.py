from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import GRAD_LEAF, GRAPH, LOSS, OUTPUT, FileContext, argument
from torchpact.lint.rule import Invalid, Hit, Rule

TENSOR_FACTORIES = {"torch.tensor", "torch.as_tensor"}
ATTACHED = {GRAPH, GRAD_LEAF, LOSS, OUTPUT}


class TensorCopyConstructed(Rule):
    """`torch.tensor(t)` copies a tensor that is attached to the autograd graph, silently detaching it.

    ## What it does
    Flags `torch.tensor(x)` where `x` is, by local dataflow, a graph-attached tensor: a model
    output, a loss, a parameter, or a value computed from them with gradients on.

    ## Why is this bad?
    On torch 2.13 `torch.tensor(t)` warns `To copy construct from a tensor, it is recommended to
    use sourceTensor.detach().clone()` and returns a new leaf with `requires_grad=False`: anything
    computed from it no longer reaches the model's parameters, so a loss built that way trains
    nothing (`backward()` then fails, or the term silently contributes no gradient).

    ## Fix safety
    No autofix: whether the copy should stay on the graph (`t.clone()`) or leave it
    (`t.detach().clone()`) is the author's choice.
    """

    code = "TP215"
    category = Category.AUTOGRAD
    severity = Severity.WARNING
    requires = (
        "the argument of `torch.tensor(...)` is graph-attached by local dataflow: a model output, a loss, a "
        "parameter",
    )
    message = ("`torch.tensor(t)` on a graph-attached tensor returns a detached copy: gradients stop there "
               "(torch 2.13 warns)")
    fix_hint = "use `t.clone()` to keep the graph, or `t.detach().clone()` to leave it on purpose"
    nodes = (ast.Call,)
    calls = frozenset({"tensor"})
    triggers = ("tensor(",)

    valid = ["""
import torch
out = model(x)
loss = criterion(out, y)
logged = torch.tensor(loss.item())
labels = torch.tensor(batch_labels)
keep = out.clone()
"""]
    invalid = [Invalid("""
import torch
out = model(x)
scores = torch.tensor(out)
loss = criterion(scores, y)
""", severity=Severity.INFO)]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if ctx.call_name(node) != "torch.tensor":
            return
        data = argument(node, "data", 0)
        if data is None or ctx.grad_disabled(node):
            return
        if ctx.kinds(data) & ATTACHED:
            yield self.hit(node, subject=ctx.locator.source(data))
