from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, argument
from torchpact.lint.rule import Hit, Invalid, Rule, last_names

DROPOUTS = {f"torch.nn.functional.{n}" for n in (
    "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout")}


class FunctionalDropoutIgnoresEval(Rule):
    """`F.dropout(x, p)` inside a module does not pass `training=self.training`, so it drops in eval too.

    ## What it does
    Flags `F.dropout`, `F.dropout1d/2d/3d`, `F.alpha_dropout` and `F.feature_alpha_dropout` calls
    inside an `nn.Module` subclass that do not pass `training`.

    ## Why is this bad?
    Unlike `nn.Dropout`, the functional form does not look at the module's mode: its `training`
    argument defaults to `True`. On torch 2.13, after `model.eval()` such a model still zeroes a
    fraction `p` of its activations and rescales the rest on every call, so evaluation and
    inference are random and worse than they should be.

    ## Fix safety
    The fix passes `training=self.training` where the call is inside a method of the module (the
    usual `forward`), which makes the call behave like `nn.Dropout`: identical in training mode,
    the identity in eval mode.
    """

    code = "TP458"  # shared with the run check of the same pattern (watch/watchers)
    category = Category.TRAINING
    severity = Severity.WARNING
    requires = (
        "the call resolves to a `torch.nn.functional` dropout and sits in an `nn.Module` class of this file",
    )
    message = "functional dropout defaults to `training=True`: it keeps dropping activations after `model.eval()`"
    fix_hint = "pass `training=self.training` (or use an `nn.Dropout` submodule)"
    nodes = (ast.Call,)
    calls = last_names(DROPOUTS)
    triggers = ("dropout",)
    fixable = True
    unsafe_fix = True  # see Fix safety: applied only with --unsafe-fixes

    valid = ["""
import torch.nn.functional as F
from torch import nn
class Block(nn.Module):
    def forward(self, x):
        x = F.dropout(x, p=0.1, training=self.training)
        return F.dropout(x, 0.1, self.training)
def augment(x):
    return F.dropout(x, 0.5)
"""]
    invalid = [Invalid("""
import torch.nn.functional as F
from torch import nn
class Block(nn.Module):
    def forward(self, x):
        h = F.dropout(self.fc(x), p=0.1)
        return F.dropout2d(h, 0.2)
""", fixed="""
import torch.nn.functional as F
from torch import nn
class Block(nn.Module):
    def forward(self, x):
        h = F.dropout(self.fc(x), p=0.1, training=self.training)
        return F.dropout2d(h, 0.2, training=self.training)
""", count=2)]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if ctx.call_name(node) not in DROPOUTS or argument(node, "training", 2) is not None:
            return
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return
        cls = ctx.enclosing_class(node)
        if cls is None or cls.name not in ctx.module_classes:
            return
        fn = ctx.enclosing_function(node)
        edits = []
        if fn is not None and fn.args.args and fn.args.args[0].arg == "self":
            edits = [ctx.locator.insert_after(node.args[-1] if not node.keywords else node.keywords[-1],
                                              ", training=self.training")]
        yield self.hit(node, edits=edits)
