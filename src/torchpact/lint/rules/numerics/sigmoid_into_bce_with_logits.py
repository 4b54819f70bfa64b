from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Hit, Rule
from torchpact.lint.rules.numerics._loss_input import activated_loss_input
from torchpact.lint.rules.numerics._util import SIGMOID


class SigmoidIntoBceWithLogits(Rule):
    """A sigmoid output is passed to `BCEWithLogitsLoss`, which applies the sigmoid itself.

    ## What it does
    Flags `F.binary_cross_entropy_with_logits(x, y)` and `nn.BCEWithLogitsLoss()(x, y)` when `x` is
    the output of a sigmoid (directly, through a variable, after reshaping, or from a model ending in
    `nn.Sigmoid`).

    ## Why is this bad?
    The loss computes `sigmoid(x)` again, so the model's probabilities in `[0, 1]` are squashed into
    `[0.5, 0.73]`. On torch 2.13 a perfect positive prediction has a loss of `log(1 + 1/e) = 0.313`
    that it can never go below, and the gradient through both sigmoids vanishes where the model is
    confident — training stalls or converges to a poorly calibrated model with no error.

    ## Fix safety
    No autofix: remove the sigmoid from the model's training output and give the logits to the loss
    (keep `torch.sigmoid` only where probabilities are needed, e.g. for predictions).
    """

    code = "TP333"
    category = Category.NUMERICS
    severity = Severity.ERROR
    requires = (
        "the loss is `F.binary_cross_entropy_with_logits` / `nn.BCEWithLogitsLoss` (an instance by every binding), "
        "resolved through its import",
        "its input holds a sigmoid output on the one definition that reaches it: a torch sigmoid call, a tensor's "
        "`.sigmoid()`, an `nn.Sigmoid` instance, or a model of this file ending in one (`nn.Sequential`, a class "
        "whose `forward` returns it)",
    )
    message = "sigmoid output is passed to BCEWithLogitsLoss, which applies the sigmoid again"
    fix_hint = "pass the logits (drop the sigmoid) to `BCEWithLogitsLoss` / `binary_cross_entropy_with_logits`"
    nodes = (ast.Call,)
    triggers = ("with_logits", "WithLogits")

    valid = ["""
import torch
import torch.nn.functional as F
loss = F.binary_cross_entropy_with_logits(logits, y)
probs = torch.sigmoid(logits)
"""]
    invalid = ["""
import torch
from torch import nn
criterion = nn.BCEWithLogitsLoss()
out = torch.sigmoid(model(x))
loss = criterion(out.squeeze(1), y)
"""]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        arg = activated_loss_input(ctx, node, {"torch.nn.functional.binary_cross_entropy_with_logits"},
                                   {"torch.nn.BCEWithLogitsLoss"}, SIGMOID)
        if arg is not None:
            yield self.hit(arg, subject=arg.id if isinstance(arg, ast.Name) else None, evidence=Evidence.MUST)
