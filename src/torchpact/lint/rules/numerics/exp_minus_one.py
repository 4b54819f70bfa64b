from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules._api import respell
from torchpact.lint.rules.numerics._integers import whole_numbers
from torchpact.lint.rules.numerics.log_of_one_plus import is_one


class ExpMinusOne(Rule):
    """`torch.exp(x) - 1` is computed instead of `torch.expm1(x)`.

    ## What it does
    Flags `torch.exp(x) - 1` (TorchFix TOR107).

    The condition it needs: `x` may hold values of magnitude well below 1. For a whole number `x`
    (an integer dtype, a count, a `floor` / `ceil` / `round` result: see `_integers.py`) `exp(x)` is
    1 exactly or at least e, and the subtraction cancels nothing, so it is not flagged.

    ## Why is this bad?
    For small `x`, `exp(x)` rounds to 1 and the subtraction cancels every significant digit: on
    torch 2.13, in float32, `torch.exp(1e-10) - 1` is exactly `0.` while `torch.expm1(1e-10)` is
    `1e-10`.

    ## Fix safety
    The fix rewrites the expression to `torch.expm1(x)`, the same function without the cancellation.
    """

    code = "TP320"
    category = Category.NUMERICS
    severity = Severity.INFO
    requires = (
        "the `exp` resolves to `torch.exp`, and 1 is subtracted from it",
    )
    message = "`torch.exp(x) - 1` cancels to 0 for small x"
    fix_hint = "use `torch.expm1(x)`"
    nodes = (ast.BinOp,)
    triggers = ("exp",)
    fixable = True

    valid = ["""
import torch
y = torch.expm1(x)
z = torch.exp(x) - 2
w = 1 - torch.exp(x)
""", """
import torch
steps = torch.arange(10)
growth = torch.exp(steps) - 1
""", """
import torch
def scaled(counts, n_bins: int):
    bins = torch.randint(0, n_bins, (counts,))
    return torch.exp(bins.float()) - 1.0
""", """
import torch
k = len(vocab)
boost = torch.exp(torch.tensor(k)) - 1
"""]
    invalid = [
        Invalid("""
import torch
y = torch.exp(x) - 1
z = torch.exp(-t / tau) - 1.0
""", fixed="""
import torch
y = torch.expm1(x)
z = torch.expm1(-t / tau)
""", count=2),
        Invalid("""
import torch
steps = torch.arange(10) / 10
growth = torch.exp(steps) - 1
""", fixed="""
import torch
steps = torch.arange(10) / 10
growth = torch.expm1(steps)
"""),
        Invalid("""
import torch
def scaled(counts, n_bins: int):
    bins = torch.rand(counts) * n_bins
    return torch.exp(bins.float()) - 1.0
""", fixed="""
import torch
def scaled(counts, n_bins: int):
    bins = torch.rand(counts) * n_bins
    return torch.expm1(bins.float())
"""),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.BinOp)
        call = node.left
        if not (isinstance(node.op, ast.Sub) and is_one(node.right) and ctx.call_name(call) == "torch.exp"):
            return
        assert isinstance(call, ast.Call)
        if len(call.args) != 1 or call.keywords or whole_numbers(call.args[0], ctx):
            return  # exp(x) - 1 cancels only for |x| << 1, which no non-zero whole number is
        func = respell(call.func, ctx, "torch.expm1")
        edits = [ctx.locator.replace(node, f"{func}({ctx.locator.source(call.args[0])})")] if func else []
        yield self.hit(node, edits=edits)
