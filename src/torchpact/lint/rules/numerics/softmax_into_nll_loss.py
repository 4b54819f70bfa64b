from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Hit, Rule
from torchpact.lint.rules.numerics._loss_input import activated_loss_input
from torchpact.lint.rules.numerics._util import SOFTMAX


class SoftmaxIntoNllLoss(Rule):
    """The output of a softmax is passed to `NLLLoss` / `F.nll_loss`, which expects log-probabilities.

    ## What it does
    Flags `F.nll_loss(x, y)` and `nn.NLLLoss()(x, y)` when `x` is the output of a softmax (directly,
    through a variable, after reshaping, or from a model ending in `nn.Softmax`).

    ## Why is this bad?
    `nll_loss` only picks `-x[target]`; it assumes `x` is already `log_softmax`. Given
    probabilities, on torch 2.13 the "loss" is `-p[target]`, between -1 and 0: a perfect
    prediction scores -1, the value is never the cross-entropy, and its gradient `-1` on `p[target]`
    is flat instead of `-1/p` — a badly wrong prediction gets no stronger push than a good one.
    The run check of the same code sees this at run time.

    ## Fix safety
    No autofix here: use `F.log_softmax` instead of `F.softmax` before the loss (or give the logits
    to `F.cross_entropy`), which changes the loss values to the real negative log-likelihood.
    """

    code = "TP357"  # shared with the run check of the same pattern (watch/watchers/loss_inputs.py)
    category = Category.NUMERICS
    severity = Severity.ERROR
    requires = (
        "the loss is `F.nll_loss` / `nn.NLLLoss` (an instance by every binding), resolved through its import",
        "its input holds a softmax output on the one definition that reaches it: a torch softmax call, a tensor's "
        "`.softmax()`, an `nn.Softmax` instance, or a model of this file ending in one (`nn.Sequential`, a class whose `forward` returns it)",
    )
    message = ("softmax output is passed to nll_loss, which expects log-probabilities: the loss is -p[target], "
               "not the negative log-likelihood")
    fix_hint = "use `log_softmax` instead of `softmax` before `nll_loss` (or pass the logits to `cross_entropy`)"
    nodes = (ast.Call,)
    triggers = ("nll_loss", "NLLLoss")

    valid = ["""
import torch.nn.functional as F
loss = F.nll_loss(F.log_softmax(logits, dim=1), y)
probs = F.softmax(logits, dim=1)
"""]
    invalid = ["""
import torch.nn.functional as F
from torch import nn
criterion = nn.NLLLoss()
probs = F.softmax(model(x), dim=1)
loss = criterion(probs, y)
"""]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        arg = activated_loss_input(ctx, node, {"torch.nn.functional.nll_loss"}, {"torch.nn.NLLLoss"}, SOFTMAX)
        if arg is not None:
            yield self.hit(arg, subject=arg.id if isinstance(arg, ast.Name) else None, evidence=Evidence.MUST)
