from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import LOSS_FN, FileContext
from torchpact.lint.rule import Hit, Invalid, Rule, last_names
from torchpact.lint.rules.numerics._util import (
    SOFTMAX,
    direct_activation_call,
    produced_by,
)

LOG_FUNCTIONS = {"torch.log"}
# What reads the log-probabilities of classes other than the most likely one: a loss, a reduction
# over classes, a pick of given labels.
_READS_CLASSES = {"sum", "mean", "nansum", "nanmean", "logsumexp", "prod", "norm", "cumsum", "gather",
                  "take_along_dim", "index_select", "dot", "matmul", "einsum", "nll_loss", "kl_div",
                  "cross_entropy", "binary_cross_entropy", "ctc_loss", "poisson_nll_loss"}
# Chained right after the log, these leave no gradient to flow back.
_DETACHING = {"detach", "numpy", "item", "tolist"}
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

    Of the two consequences, the NaN gradient needs a gradient to flow through the log, and the
    `-inf` value needs the log-probability of an unlikely class to be read. Where no gradient flows
    (under `torch.no_grad()` / `inference_mode()`, or the result is detached in the same chain:
    `.detach()`, `.numpy()`, `.item()`, `.tolist()`) and nothing reads it over the classes (no loss,
    no `sum`/`mean`/`logsumexp`, no `gather` of given labels) — a decoder reading the entry of its
    own argmax, whose probability is at least 1/vocab — the finding is an `info`: `log_softmax`
    is still cleaner, but no `-inf` is visibly read.

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
        Invalid(
            """
import torch
def next_token(logits):
    probs = torch.softmax(logits[:, -1], dim=-1)
    ids = torch.argmax(probs, dim=-1, keepdim=True)
    logp = torch.log(probs).detach().cpu().numpy()
    return ids, logp
""",
            severity=Severity.INFO,
        ),
        Invalid(
            """
import torch
@torch.no_grad()
def greedy_step(model, x):
    p = model(x).softmax(-1)
    best = p.argmax(-1)
    return best, p.log()
""",
            severity=Severity.INFO,
        ),
        Invalid(
            """
import torch
import torch.nn.functional as F
def beam_scores(logits, k):
    with torch.inference_mode():
        scores = torch.log(F.softmax(logits, dim=-1))
        return scores.topk(k, dim=-1)
""",
            fixed="""
import torch
import torch.nn.functional as F
def beam_scores(logits, k):
    with torch.inference_mode():
        scores = F.log_softmax(logits, dim=-1)
        return scores.topk(k, dim=-1)
""",
            severity=Severity.INFO,
        ),
        Invalid(
            """
import torch
def top_logprob(logits):
    lp = logits.softmax(-1).log().max(-1).values.item()
    return lp
""",
            fixed="""
import torch
def top_logprob(logits):
    lp = logits.log_softmax(-1).max(-1).values.item()
    return lp
""",
            severity=Severity.INFO,
        ),
        Invalid(
            """
import torch
import torch.nn.functional as F
def chunk_loss(hidden, weight, labels):
    with torch.no_grad():
        probs = F.softmax(hidden @ weight.t(), dim=-1)
        return F.nll_loss(probs.log(), labels, reduction="none")
""",
        ),
        Invalid(
            """
import torch
def sequence_score(logits, targets):
    with torch.no_grad():
        p = torch.softmax(logits, dim=-1)
        logp = torch.log(p)
        return logp.gather(-1, targets[..., None]).squeeze(-1)
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
            edits, subject = self._fix(inner, node, ctx), None
        elif isinstance(inner, ast.Name) and produced_by(ctx, inner, SOFTMAX) is not None:
            edits, subject = [], inner.id
        else:
            return
        if _no_gradient(node, ctx) and not _read_over_classes(node, ctx):
            yield self.hit(node, subject=subject, edits=edits, severity=Severity.INFO, message=(
                "log of a softmax is computed in two steps: probabilities that underflow to 0 give -inf "
                "(no gradient flows here, and no loss or reduction over classes reads it)"))
        else:
            yield self.hit(node, subject=subject, edits=edits)

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


def _no_gradient(log: ast.Call, ctx: FileContext) -> bool:
    """Gradients are off where the log runs, or its result is detached at once."""
    if ctx.grad_disabled(log):
        return True
    cur, parent = log, ctx.parent(log)
    while True:  # along `.max(-1).values.item()`: method calls, fields and indexing on the result
        if isinstance(parent, ast.Attribute) and parent.value is cur:
            if parent.attr in _DETACHING:
                return True
        elif not ((isinstance(parent, ast.Call) and parent.func is cur)
                  or (isinstance(parent, ast.Subscript) and parent.value is cur)):
            return False
        cur, parent = parent, ctx.parent(parent)


def _read_over_classes(log: ast.Call, ctx: FileContext) -> bool:
    """The result (or the name it is bound to) is fed to a loss, a reduction or a pick of labels."""
    uses: list[ast.AST] = [log]
    stmt = ctx.statement(log)
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        name = stmt.targets[0].id
        scope = ctx.scope(log)
        body = scope.body if isinstance(getattr(scope, "body", None), list) else [scope]
        uses += [n for n in ctx.walk_scope(body) if isinstance(n, ast.Name) and n.id == name
                 and isinstance(n.ctx, ast.Load) and any(o is stmt for o, _ in ctx.bindings(n))]
    return any(_feeds_reader(use, ctx) for use in uses)


def _feeds_reader(use: ast.AST, ctx: FileContext) -> bool:
    for anc in ctx.ancestors(use):
        if isinstance(anc, ast.stmt):
            return False
        if isinstance(anc, ast.Call):
            func = anc.func
            last = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if last in _READS_CLASSES or LOSS_FN in ctx.kinds(func):
                return True
    return False
