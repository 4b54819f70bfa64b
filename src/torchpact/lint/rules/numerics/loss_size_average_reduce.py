from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FUNCTIONAL_LOSSES, FileContext, is_const, keyword
from torchpact.lint.edits import Edit
from torchpact.lint.rule import Hit, Invalid, Rule

LEGACY = ("size_average", "reduce")


def _reduction(size_average: ast.AST | None, reduce: ast.AST | None) -> str | None:
    """What torch's legacy_get_string gives for constant arguments (None/True/False), else None."""
    values = []
    for node in (size_average, reduce):
        if node is None:
            values.append(True)
        elif is_const(node, True) or is_const(node, False):
            values.append(node.value)
        else:
            return None
    size_avg, red = values
    return "none" if not red else "mean" if size_avg else "sum"


class LossSizeAverageReduce(Rule):
    """A loss is given the deprecated `size_average=` / `reduce=` instead of `reduction=`.

    ## What it does
    Flags loss modules (`nn.*Loss(...)`) and functional losses (`F.mse_loss(...)`, ...) called with
    `size_average` or `reduce`.

    ## Why is this bad?
    On torch 2.13 both warn `size_average and reduce args will be deprecated, please use
    reduction='sum' instead.` Together they encode three reductions in two booleans, and an
    explicit `reduction=` next to them is silently ignored: `nn.MSELoss(size_average=False,
    reduction="mean")` sums.

    ## Fix safety
    With constant `True`/`False` values and no `reduction=`, the fix replaces both with the
    `reduction=` torch derives from them (`size_average=False` -> `reduction="sum"`, `reduce=False`
    -> `reduction="none"`), so the loss is unchanged.
    """

    code = "TP322"
    category = Category.NUMERICS
    severity = Severity.WARNING
    requires = (
        "the loss resolves to a `torch.nn` loss class or functional loss through the file's imports",
    )
    message = "`size_average` / `reduce` are deprecated (they warn on torch 2.13) and override `reduction=`"
    fix_hint = 'use `reduction="mean" | "sum" | "none"`'
    nodes = (ast.Call,)
    triggers = ("size_average", "reduce=")
    fixable = True

    valid = ["""
import torch.nn.functional as F
from torch import nn
crit = nn.MSELoss(reduction="sum")
loss = F.cross_entropy(logits, y, reduction="none")
total = functools.reduce(add, xs)
"""]
    invalid = [
        Invalid("""
import torch.nn.functional as F
from torch import nn
crit = nn.MSELoss(size_average=False)
per_item = F.nll_loss(logp, y, reduce=False)
""", fixed="""
import torch.nn.functional as F
from torch import nn
crit = nn.MSELoss(reduction="sum")
per_item = F.nll_loss(logp, y, reduction="none")
""", count=2),
        """
from torch import nn
crit = nn.BCELoss(size_average=args.avg)
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if not any(k.arg in LEGACY for k in node.keywords):
            return
        qn = ctx.call_name(node) or ""
        is_loss = (qn.startswith("torch.nn.") and qn.endswith("Loss")) or (
            qn.startswith("torch.nn.functional.") and qn.rsplit(".", 1)[1] in FUNCTIONAL_LOSSES)
        if not is_loss:
            return
        edits = []
        reduction = None if keyword(node, "reduction") else _reduction(keyword(node, "size_average"),
                                                                        keyword(node, "reduce"))
        if reduction is not None:
            legacy = [k for k in node.keywords if k.arg in LEGACY]
            first, *rest = legacy
            edits.append(ctx.locator.replace(first, f'reduction="{reduction}"'))
            for k in rest:
                edits.append(_remove_keyword(ctx, node, k))
        yield self.hit(node, subject=qn, edits=edits)


def _remove_keyword(ctx: FileContext, call: ast.Call, kw: ast.keyword) -> Edit:
    """An edit deleting ``kw`` and the comma before it."""
    start, end = ctx.locator.span(kw)
    text = ctx.locator.text
    before = text.rindex(",", 0, start)
    return Edit(before, end, "")
