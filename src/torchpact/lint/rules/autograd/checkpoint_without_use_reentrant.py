from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, keyword
from torchpact.lint.rule import Hit, Invalid, Rule, last_names
from torchpact.lint.rules._api import call_text

CHECKPOINTS = {"torch.utils.checkpoint.checkpoint", "torch.utils.checkpoint.checkpoint_sequential"}


class CheckpointWithoutUseReentrant(Rule):
    """`torch.utils.checkpoint.checkpoint` is called without `use_reentrant`.

    ## What it does
    Flags `checkpoint(...)` and `checkpoint_sequential(...)` calls that do not pass
    `use_reentrant` (TorchFix TOR003, with its autofix).

    ## Why is this bad?
    On torch 2.13 every such call warns `the use_reentrant parameter should be passed explicitly
    ... use_reentrant=False is recommended`. The implicit default is the reentrant variant, which
    silently computes no parameter gradients when none of the checkpointed segment's *inputs*
    requires grad (the usual case for the first block, whose input is data): the weights inside
    the checkpoint are never trained. The proof shows it.

    ## Fix safety
    The fix adds `use_reentrant=False` (TorchFix's choice and torch's recommendation). The
    non-reentrant variant gives correct gradients in the case above and the same gradients
    elsewhere, but it does not support a few things the reentrant one does (e.g. a checkpointed
    function that calls `torch.autograd.backward` inside), so review the change.
    """

    code = "TP211"
    category = Category.AUTOGRAD
    severity = Severity.WARNING
    requires = (
        "the call resolves to `torch.utils.checkpoint.checkpoint` / `checkpoint_sequential` through the "
        "file's imports",
    )
    message = ("`checkpoint` without `use_reentrant`: it warns on torch 2.13, and the implicit reentrant "
               "variant computes no gradients for the segment's weights when no input requires grad")
    fix_hint = "pass `use_reentrant=False`"
    triggers = ("checkpoint",)
    fixable = True
    unsafe_fix = True  # see Fix safety: applied only with --unsafe-fixes
    nodes = (ast.Call,)
    calls = last_names(CHECKPOINTS)

    valid = ["""
import torch.utils.checkpoint as cp
from torch.utils.checkpoint import checkpoint
h = cp.checkpoint(block, x, use_reentrant=False)
h = checkpoint(block, x, use_reentrant=True)
def f(*a, **kw):
    return checkpoint(block, *a, **kw)
"""]
    invalid = [Invalid("""
import torch.utils.checkpoint as cp
from torch.utils.checkpoint import checkpoint
h = cp.checkpoint(block, x)
h = checkpoint(self.layer, h, mask)
""", fixed="""
import torch.utils.checkpoint as cp
from torch.utils.checkpoint import checkpoint
h = cp.checkpoint(block, x, use_reentrant=False)
h = checkpoint(self.layer, h, mask, use_reentrant=False)
""", count=2)]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        qn = ctx.call_name(node)
        if qn not in CHECKPOINTS or keyword(node, "use_reentrant") is not None:
            return
        if any(k.arg is None for k in node.keywords):
            return  # may be passed through **kwargs
        fixed = call_text(ctx, node, ctx.locator.source(node.func), extra_last=["use_reentrant=False"])
        yield self.hit(node, subject=qn, edits=[ctx.locator.replace(node, fixed)])
