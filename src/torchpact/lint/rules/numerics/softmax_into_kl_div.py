from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Hit, Rule
from torchpact.lint.rules.numerics._loss_input import activated_loss_input
from torchpact.lint.rules.numerics._util import SOFTMAX


class SoftmaxIntoKlDiv(Rule):
    """`F.kl_div` / `nn.KLDivLoss` is given probabilities as its input, where it expects log-probabilities.

    ## What it does
    Flags `F.kl_div(x, target)` and `nn.KLDivLoss()(x, target)` when `x` (the first argument) is
    the output of a softmax.

    ## Why is this bad?
    Unlike most losses, `kl_div` takes its *input* as log-probabilities (and its target as
    probabilities unless `log_target=True`): it computes `target * (log(target) - input)`. Given
    `softmax(x)`, on torch 2.13 the result is not a divergence at all — for two identical
    distributions it is not 0, and it can be negative — so distillation and regularisation terms
    built this way pull the model in meaningless directions without any error.

    ## Fix safety
    No autofix: use `log_softmax` for the input (`F.kl_div(F.log_softmax(student, -1),
    F.softmax(teacher, -1), reduction="batchmean")`); the loss values change to the real KL.
    """

    code = "TP332"
    category = Category.NUMERICS
    severity = Severity.ERROR
    requires = (
        "the loss is `F.kl_div` / `nn.KLDivLoss` (an instance by every binding), resolved through its import",
        "its input holds a softmax output on the one definition that reaches it: a torch softmax call, a tensor's "
        "`.softmax()`, an `nn.Softmax` instance, or a model of this file ending in one (`nn.Sequential`, a class "
        "whose `forward` returns it)",
    )
    message = "kl_div's input must be log-probabilities: given a softmax output, the result is not a divergence"
    fix_hint = "pass `log_softmax(...)` as the first argument of `kl_div` (the target stays probabilities)"
    nodes = (ast.Call,)
    triggers = ("kl_div", "KLDivLoss")

    valid = ["""
import torch.nn.functional as F
loss = F.kl_div(F.log_softmax(student, -1), F.softmax(teacher, -1), reduction="batchmean")
"""]
    invalid = ["""
import torch.nn.functional as F
loss = F.kl_div(F.softmax(student, -1), F.softmax(teacher, -1), reduction="batchmean")
"""]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        arg = activated_loss_input(ctx, node, {"torch.nn.functional.kl_div"}, {"torch.nn.KLDivLoss"}, SOFTMAX)
        if arg is not None:
            yield self.hit(arg, subject=arg.id if isinstance(arg, ast.Name) else None, evidence=Evidence.MUST)
