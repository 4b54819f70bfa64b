from __future__ import annotations

import ast
import re
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules.numerics._util import (
    SIGMOID,
    direct_activation_call,
    first_arg,
    is_instance_of,
    produced_by,
)

BCE_FUNCTIONS = {"torch.nn.functional.binary_cross_entropy"}
BCE_MODULES = {"torch.nn.BCELoss"}


class SigmoidIntoBCE(Rule):
    """A sigmoid output is fed to `BCELoss` / `F.binary_cross_entropy` instead of using the logits version.

    ## What it does
    Flags `F.binary_cross_entropy(p, y)` and `nn.BCELoss()(p, y)` (also through a variable holding
    the loss module) when `p` is the output of a sigmoid: `torch.sigmoid` / `F.sigmoid` /
    `x.sigmoid()` / an `nn.Sigmoid` module, directly, through a variable assigned from it, after
    reshaping, or as the output of a model ending in `nn.Sigmoid()`.

    A class or function that says it is the unstable form — its name or docstring names the
    instability (`BCEAfterSigmoidLoss`: "the numerically unstable version of explicit Sigmoid + BCE
    loss", offered next to the stable loss, or kept to compare against it) — computes it on purpose:
    the finding is then `info`, a reminder of the documented choice, and no fix is offered (it would
    replace the very option the code exists to offer). Only the class and functions that enclose the
    loss call count, not their callers.

    ## Why is this bad?
    In float32 `torch.sigmoid` of a logit of 17 or more is exactly 1.0, and `binary_cross_entropy`
    clamps `log(p)` at -100. On torch 2.13, a logit of 20 with target 0 gives `BCELoss = 100.0` (the
    clamp) and a gradient of exactly `0.0` on the logit: the model's most confident mistakes produce
    no learning signal at all (on the negative side the gradient is `4e-06` at -40 and 0 past -88).
    `BCEWithLogitsLoss` on the same logit gives the true loss `20.0` and gradient `1.0`. (Under CUDA
    autocast torch refuses the probabilities version outright: "torch.nn.functional.binary_cross_entropy
    and torch.nn.BCELoss are unsafe to autocast.")

    ## Fix safety
    For the written-out `F.binary_cross_entropy(torch.sigmoid(z), y, ...)` the fix calls
    `F.binary_cross_entropy_with_logits(z, y, ...)` with the same arguments: the same loss where the
    sigmoid did not saturate, and the correct loss and gradient where it did. Other forms (a
    `BCELoss` module, a variable, a model ending in `nn.Sigmoid`) need the sigmoid removed from the
    model and `nn.BCEWithLogitsLoss`, which is left to you.
    """

    code = "TP303"
    category = Category.NUMERICS
    severity = Severity.WARNING
    requires = (
        "the loss resolves to `binary_cross_entropy` / `nn.BCELoss` and its input to a sigmoid output",
    )
    message = ("sigmoid output is fed to binary_cross_entropy: saturated predictions give a loss clamped "
               "at 100 and a zero gradient")
    fix_hint = "drop the sigmoid and use BCEWithLogitsLoss / F.binary_cross_entropy_with_logits on the logits"
    nodes = (ast.Call,)
    triggers = ("binary_cross_entropy", "BCELoss")
    fixable = True
    facts = ("bce-clamps-log-at-minus-100",)

    valid = [
        """
import torch
import torch.nn as nn
criterion = nn.BCEWithLogitsLoss()
for x, y in loader:
    logits = model(x)
    loss = criterion(logits, y)
    preds = torch.sigmoid(logits) > 0.5
""",
        """
import torch
import torch.nn.functional as F
def loss(p, y):
    # p may come from anywhere (a calibrated probability): nothing to say
    return F.binary_cross_entropy(p, y)
""",
        """
import torch
import torch.nn.functional as F
def loss(gate, y):
    probs = torch.softmax(gate, -1)[:, 1]
    return F.binary_cross_entropy(probs, y)
""",
    ]
    invalid = [
        Invalid(
            """
import torch
import torch.nn.functional as F
def loss_fn(logits, target):
    return F.binary_cross_entropy(torch.sigmoid(logits), target, reduction="sum")
""",
            fixed="""
import torch
import torch.nn.functional as F
def loss_fn(logits, target):
    return F.binary_cross_entropy_with_logits(logits, target, reduction="sum")
""",
        ),
        """
import torch.nn as nn
criterion = nn.BCELoss()
for x, y in loader:
    p = model(x).sigmoid().squeeze(-1)
    loss = criterion(p, y)
""",
        """
from torch import nn
disc = nn.Sequential(nn.Linear(64, 1), nn.Sigmoid())
bce = nn.BCELoss()
d_loss = bce(disc(fake), zeros)
""",
        Invalid("""
import torch
import torch.nn.functional as F
from torch import nn

class BCEAfterSigmoidLoss(nn.Module):
    \"\"\"The numerically unstable version of explicit Sigmoid + BCE loss.\"\"\"

    def forward(self, x, target, weight=None):
        return F.binary_cross_entropy(x.sigmoid(), target, weight=weight)

class Baselines:
    \"\"\"Reference losses.\"\"\"

    def naive(self, logits, y):
        \"\"\"Kept to show the instability of sigmoid followed by BCE.\"\"\"
        probs = torch.sigmoid(logits)
        return nn.BCELoss()(probs, y)

def unstable_bce(z, y):
    def inner(p):
        return F.binary_cross_entropy(input=p, target=y)
    return inner(torch.sigmoid(z)) + F.binary_cross_entropy(torch.sigmoid(z), y)
""", count=3, severity=Severity.INFO),
        Invalid("""
import torch
import torch.nn.functional as F
from torch import nn

class StableLoss(nn.Module):
    \"\"\"A numerically stable binary loss.\"\"\"

    def forward(self, x, target):
        return nn.BCELoss()(torch.sigmoid(x), target)

def train_step(logits, y):
    \"\"\"One training step on probabilities.\"\"\"
    return nn.BCELoss()(logits.sigmoid(), y)
""", count=2),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        functional = ctx.call_name(node) in BCE_FUNCTIONS
        if not (functional or is_instance_of(ctx, node.func, BCE_MODULES)):
            return
        arg = first_arg(node)
        if arg is None or produced_by(ctx, arg, SIGMOID) is None:
            return
        edits = []
        logits = direct_activation_call(ctx, arg, SIGMOID)
        if (functional and logits is not None and isinstance(node.func, ast.Attribute) and node.args
                and node.args[0] is arg):
            edits = [ctx.locator.replace(node.func, ctx.locator.source(node.func) + "_with_logits"),
                     ctx.locator.replace(arg, ctx.locator.source(logits))]
        subject = arg.id if isinstance(arg, ast.Name) else None
        if _documented_unstable(node, ctx):
            yield self.hit(arg, subject=subject, severity=Severity.INFO, message=(
                "sigmoid output is fed to binary_cross_entropy in code that documents it as the unstable form: "
                "saturated predictions give a loss clamped at 100 and a zero gradient, as stated"))
            return
        yield self.hit(arg, subject=subject, edits=edits)


_UNSTABLE = re.compile(r"(?i)unstable|instabilit")


def _documented_unstable(call: ast.Call, ctx: FileContext) -> bool:
    """Whether a class or function enclosing ``call`` names the instability (name or docstring)."""
    for anc in ctx.ancestors(call):
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if _UNSTABLE.search(anc.name) or _UNSTABLE.search(ast.get_docstring(anc) or ""):
                return True
    return False
