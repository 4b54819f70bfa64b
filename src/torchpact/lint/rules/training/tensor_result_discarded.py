from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import (
    BATCH, GRAD_LEAF, GRAPH, LOSS, MODULE, OUTPUT, TENSOR, FileContext,
)
from torchpact.lint.rule import Hit, Invalid, Rule

# Tensor methods that return a new tensor and leave their receiver unchanged.
PURE = {
    "to", "cuda", "cpu", "float", "half", "double", "bfloat16", "long", "int", "bool",
    "clamp", "clip", "add", "sub", "mul", "div", "pow", "abs", "neg", "exp", "log", "sqrt",
    "detach", "contiguous", "view", "reshape", "squeeze", "unsqueeze", "permute", "transpose", "t",
    "flatten", "clone", "masked_fill", "index_fill", "scatter", "fill_diagonal", "type",
    "normal", "uniform", "zero", "fill", "requires_grad",
}
TENSORS = {TENSOR, BATCH, GRAPH, GRAD_LEAF, LOSS, OUTPUT}
# Methods nn.Module has too, where they convert the module in place: judged only on a local name.
MODULE_METHODS = {"to", "cuda", "cpu", "float", "half", "double", "bfloat16", "type", "requires_grad", "zero"}


class TensorResultDiscarded(Rule):
    """A tensor method that returns a new tensor is called as a statement, so its result is lost.

    ## What it does
    Flags statements like `x.to(device)`, `x.float()`, `x.clamp(0, 1)`, `x.add(1)`,
    `x.unsqueeze(0)` whose result is not assigned, when `x` is a tensor by local dataflow
    (a batch, a model output, a tensor factory's result) and not an `nn.Module`.

    ## Why is this bad?
    Unlike `nn.Module.to`, which moves the module in place and returns it, `Tensor.to` and the
    other methods here return a new tensor and leave `x` unchanged (the in-place variants end in
    `_`: `clamp_`, `add_`). On torch 2.13 `x.to(torch.float64)` on its own line changes nothing:
    the data stays on the CPU / in the old dtype and a later step fails with a device or dtype
    mismatch — or silently computes on the unconverted values.

    ## Fix safety
    No autofix: assign the result (`x = x.to(device)`) or use the in-place variant — which one is
    meant depends on whether other references to the tensor should see the change.
    """

    code = "TP417"
    category = Category.TRAINING
    severity = Severity.WARNING
    requires = (
        "the receiver is a tensor by local dataflow (a batch, a model output, a factory's result), not a "
        "module",
    )
    message = "this tensor method returns a new tensor and leaves the original unchanged: the result is discarded"
    fix_hint = "assign the result (`x = x.to(device)`) or use the in-place variant (`x.clamp_(...)`)"
    nodes = (ast.Expr,)

    valid = ["""
import torch
model.to(device)
net = Net()
net.cuda()
x = x.to(device)
x.clamp_(0, 1)
for images, labels in loader:
    images = images.to(device)
for batch in loader:
    batch.to(device)
class Strategy:
    def setup(self):
        self.model = torch.zeros(1)
        self.model.to(self.root_device)
"""]
    invalid = [Invalid("""
import torch
for images, labels in loader:
    images.to(device)
    labels.cuda()
    logits = model(images)
""", count=2, severity=Severity.INFO)]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Expr)
        call = node.value
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in PURE):
            return
        recv = call.func.value
        if ctx.resolve(call.func) is not None:
            return
        if call.func.attr in MODULE_METHODS and not isinstance(recv, ast.Name):
            return  # `self.model.to(device)`: attributes are often modules that dataflow cannot see
        kinds = ctx.kinds(recv)
        if not kinds & TENSORS or MODULE in kinds:
            return
        if BATCH in kinds and _whole_batch(ctx, recv) and not kinds & {GRAPH, GRAD_LEAF, LOSS, OUTPUT}:
            return  # a whole batch may be a BatchEncoding / custom object whose .to() works in place
        yield self.hit(call, subject=ctx.locator.source(recv))


def _whole_batch(ctx: FileContext, recv: ast.AST) -> bool:
    return any(isinstance(owner, (ast.For, ast.AsyncFor)) and isinstance(owner.target, ast.Name)
               for owner, _ in ctx.bindings(recv))
