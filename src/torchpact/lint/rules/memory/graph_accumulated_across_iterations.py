from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import GRAPH, LOSS, OUTPUT, FileContext
from torchpact.lint.rule import Hit, Invalid, Rule


class GraphAccumulatedAcrossIterations(Rule):
    """A tensor attached to the autograd graph is summed into a running total across loop iterations.

    ## What it does
    Flags `total += loss` (or `total = total + loss`) inside a loop that calls `.backward()` every
    iteration, when `loss` was computed with gradients enabled and `total` is never the target of
    `.backward()` in the same function.

    ## Why is this bad?
    `loss` carries its `grad_fn`, so `total` becomes a tensor whose graph links every iteration's
    graph: after N steps `total.grad_fn` reaches N forward graphs and all their saved activations.
    `backward()` on each step's loss frees only that step's saved tensors' *use*, not the references
    `total` holds to the graph nodes, so memory grows every step until the process runs out (on
    torch 2.13, `total.grad_fn` chains one `AddBackward0` per iteration). Intended accumulation of a
    loss that is then back-propagated (gradient accumulation) is not flagged.

    ## Fix safety
    The fix adds `.detach()` to the accumulated value: same numbers, same tensor type, no graph. It is
    safe unless the total is differentiated outside this function (torchpact checked it is not
    within it). `.item()` is the other choice when a Python float is wanted.
    """

    code = "TP101"
    category = Category.MEMORY
    severity = Severity.ERROR
    message = "a graph-attached tensor is accumulated across iterations: every step's autograd graph stays alive and memory grows until OOM"
    fix_hint = "accumulate `loss.detach()` or `loss.item()` instead"
    nodes = (ast.AugAssign, ast.Assign)
    fixable = True
    facts = ("graph-kept-by-accumulator",)

    valid = [
        """
import torch
total = 0.0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    total += loss.item()
""",
        """
import torch
for batch in loader:
    loss = 0
    for micro in batch:
        loss += criterion(model(micro), micro)
    loss.backward()
""",
        """
import torch
total = 0
with torch.no_grad():
    for x, y in loader:
        loss = criterion(model(x), y)
        total += loss
""",
    ]
    invalid = [
        Invalid(
            """
import torch
total = 0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    total += loss
""",
            fixed="""
import torch
total = 0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    total += loss.detach()
""",
        ),
        Invalid(
            """
import torch.nn.functional as F
running = 0
for x, y in loader:
    out = model(x)
    loss = F.cross_entropy(out, y)
    loss.backward()
    running = running + loss * x.size(0)
""",
            fixed="""
import torch.nn.functional as F
running = 0
for x, y in loader:
    out = model(x)
    loss = F.cross_entropy(out, y)
    loss.backward()
    running = running + (loss * x.size(0)).detach()
""",
        ),
        Invalid(
            """
import torch
total = 0
for batch in loader:
    outputs = model(**batch)
    loss = outputs.loss
    accelerator.backward(loss)
    optimizer.step()
    total += loss
""",
            fixed="""
import torch
total = 0
for batch in loader:
    outputs = model(**batch)
    loss = outputs.loss
    accelerator.backward(loss)
    optimizer.step()
    total += loss.detach()
""",
        ),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        if isinstance(node, ast.AugAssign):
            if not isinstance(node.op, ast.Add) or not isinstance(node.target, ast.Name):
                return
            target, value = node.target, node.value
        else:
            assert isinstance(node, ast.Assign)
            if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
                return
            b = node.value
            if not (isinstance(b, ast.BinOp) and isinstance(b.op, ast.Add) and isinstance(b.left, ast.Name)
                    and b.left.id == node.targets[0].id):
                return
            target, value = node.targets[0], b.right
        loops = ctx.enclosing_loops(node)
        if not loops or ctx.grad_disabled(node):
            return
        # Only a loop that back-propagates each iteration frees its graphs per iteration; summing
        # inside a forward (residuals, auxiliary losses) is what the graph is for.
        if not any(_calls_backward(loop, ctx) for loop in loops):
            return
        kinds = ctx.kinds(value)
        if GRAPH not in kinds or not kinds & {LOSS, OUTPUT}:
            return
        if target.id in ctx.backward_names(ctx.scope(node)):
            return  # gradient accumulation: the total is what gets back-propagated
        text = ctx.locator.source(value)
        simple = isinstance(value, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
        replacement = f"{text}.detach()" if simple else f"({text}).detach()"
        yield self.hit(node, subject=target.id, edits=[ctx.locator.replace(value, replacement)])


def _calls_backward(loop: ast.AST, ctx: FileContext) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "backward"
               for n in ctx.walk_scope(loop))
