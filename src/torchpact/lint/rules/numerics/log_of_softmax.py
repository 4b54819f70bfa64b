from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Hit, Invalid, Rule, last_names
from torchpact.lint.rules.numerics._util import (
    SOFTMAX,
    direct_activation_call,
    produced_by,
)

LOG_FUNCTIONS = {"torch.log"}
# Where ``softmax`` -> ``log_softmax`` keeps the exact same signature (input, dim, dtype).
FIXABLE_SOFTMAX = {"torch.softmax", "torch.nn.functional.softmax"}


class LogOfSoftmax(Rule):
    """`log(softmax(x))` is computed in two steps instead of with `log_softmax`.

    ## What it does
    Flags `torch.log(torch.softmax(x, dim))`, `torch.log(F.softmax(x, dim))`, `x.softmax(dim).log()`,
    `F.softmax(x, dim).log()` and `torch.log(p)` where `p` was just assigned a softmax.

    ## Why is this bad?
    The softmax of a logit far below the largest one underflows to exactly 0, and its log is then
    `-inf`. On torch 2.13, for logits `[0., 200.]`, `torch.log(torch.softmax(x, 0))` is
    `[-inf, 0.]` while `torch.log_softmax(x, 0)` is `[-200., 0.]`; the gradient through the
    two-step version is `[nan, nan]`, so one such row poisons the whole backward pass. In float16
    a gap of 18 is enough. `log_softmax` computes `x - logsumexp(x)` and stays finite.

    ## Fix safety
    The fix replaces `log(softmax(x, ...))` with `log_softmax(x, ...)` — same arguments, same `dim`
    and `dtype`. Where the two-step version was finite, the results agree to rounding; where it was
    `-inf`/NaN, the fix gives the correct finite value. It is offered only for the written-out forms
    (`torch.softmax`, `F.softmax`, `x.softmax`), not through a variable.
    """

    code = "TP302"
    category = Category.NUMERICS
    severity = Severity.WARNING
    requires = (
        "the `log` and the softmax both resolve to torch's, on the one definition that reaches the log",
    )
    message = ("log of a softmax is computed in two steps: probabilities that underflow to 0 give -inf, "
               "and NaN gradients")
    fix_hint = "use log_softmax with the same dim (torch.log_softmax / F.log_softmax / x.log_softmax(dim))"
    nodes = (ast.Call,)
    calls = last_names(LOG_FUNCTIONS) | {"log"}  # ``torch.log(p)`` or ``p.log()``
    triggers = ("softmax",)
    fixable = True
    facts = ("log-of-softmax-underflows",)

    valid = [
        """
import torch
import torch.nn.functional as F
logp = F.log_softmax(logits, dim=-1)
p = torch.softmax(logits, dim=-1)
entropy = -(p * logp).sum(-1)
""",
        """
import torch
p = torch.softmax(logits, dim=-1)
logp = torch.log(p + 1e-8)
clamped = p.clamp(min=1e-6).log()
""",
        """
import torch
def f(p):
    return torch.log(p)
""",
        """
import numpy as np
import torch
probs = scipy_softmax(x)
y = np.log(torch.softmax(t, 0).numpy())
""",
    ]
    invalid = [
        Invalid(
            """
import torch
def nll(logits, target):
    logp = torch.log(torch.softmax(logits, dim=-1))
    return -logp.gather(-1, target[:, None]).mean()
""",
            fixed="""
import torch
def nll(logits, target):
    logp = torch.log_softmax(logits, dim=-1)
    return -logp.gather(-1, target[:, None]).mean()
""",
        ),
        Invalid(
            """
import torch.nn.functional as F
log_probs = F.softmax(scores / temperature, dim=1).log()
token_logp = logits.float().softmax(-1).log()
""",
            fixed="""
import torch.nn.functional as F
log_probs = F.log_softmax(scores / temperature, dim=1)
token_logp = logits.float().log_softmax(-1)
""",
            count=2,
        ),
        Invalid(
            """
import torch
from torch.nn import functional as nnf
out = torch.log(nnf.softmax(x, 1, dtype=torch.float32))
""",
            fixed="""
import torch
from torch.nn import functional as nnf
out = nnf.log_softmax(x, 1, dtype=torch.float32)
""",
        ),
        Invalid(
            """
import torch
probs = torch.softmax(policy_logits, dim=-1)
entropy = -(probs * torch.log(probs)).sum(-1)
""",
        ),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        func = node.func
        if ctx.resolve(func) in LOG_FUNCTIONS:
            if len(node.args) != 1 or node.keywords or isinstance(node.args[0], ast.Starred):
                return
            inner = node.args[0]
        elif (isinstance(func, ast.Attribute) and func.attr == "log" and not node.args and not node.keywords
              and ctx.resolve(func) is None):
            inner = func.value
        else:
            return
        if direct_activation_call(ctx, inner, SOFTMAX) is not None:
            yield self.hit(node, edits=self._fix(inner, node, ctx))
        elif isinstance(inner, ast.Name) and produced_by(ctx, inner, SOFTMAX) is not None:
            yield self.hit(node, subject=inner.id)

    @staticmethod
    def _fix(inner: ast.AST, outer: ast.Call, ctx: FileContext):
        assert isinstance(inner, ast.Call)
        func = inner.func
        if not isinstance(func, ast.Attribute) or func.attr != "softmax":
            return []
        qn = ctx.resolve(func)
        if qn is not None and qn not in FIXABLE_SOFTMAX:
            return []
        text = ctx.locator.source(inner)
        start, _ = ctx.locator.span(inner)
        _, func_end = ctx.locator.span(func)
        head = ctx.locator.source(func.value)
        replacement = f"{head}.log_softmax{text[func_end - start:]}"
        return [ctx.locator.replace(outer, replacement)]
