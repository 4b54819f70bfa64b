from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import GRAD_LEAF, MODULE, TENSOR, FileContext
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules.autograd._util import note_parameters_of, parameter_loop_binding


class RequireGradTypo(Rule):
    """`x.require_grad = ...` is assigned: a misspelling of `requires_grad` that does nothing.

    ## What it does
    Flags assignments to an attribute named `require_grad` (TorchFix TOR002, with its autofix).

    ## Why is this bad?
    A tensor or parameter accepts any new Python attribute, so on torch 2.13 `p.require_grad =
    False` silently creates an unused attribute: the parameter keeps `requires_grad=True` and the
    "frozen" layer goes on training (and `x.require_grad = True` leaves `x` without gradients).

    ## Fix safety
    The fix renames the attribute to `requires_grad`, which is what the line meant. Setting it can
    raise where the old line did not (`requires_grad` can only be changed on leaf tensors) — an
    error that was hidden before.
    """

    code = "TP210"
    category = Category.AUTOGRAD
    severity = Severity.ERROR
    message = "`require_grad` is a misspelling of `requires_grad`: the assignment creates an unused attribute"
    fix_hint = "assign `requires_grad`"
    nodes = (ast.Assign, ast.AnnAssign, ast.AugAssign)
    triggers = ("require_grad",)
    requires = ("the object is a tensor or module: resolved, or a parameter of a value resolved to a module",)
    fixable = True
    unsafe_fix = True  # see Fix safety: applied only with --unsafe-fixes

    valid = ["""
import torch
for p in model.backbone.parameters():
    p.requires_grad = False
x.requires_grad_(True)
"""]
    invalid = [Invalid("""
import torch
for p in model.backbone.parameters():
    p.require_grad = False
""", fixed="""
import torch
for p in model.backbone.parameters():
    p.requires_grad = False
""", severity=Severity.INFO, evidence=Evidence.UNRESOLVED), Invalid("""
import torch
import torch.nn as nn
encoder = nn.Linear(4, 4)
scale = torch.ones(4)
scale.require_grad = True
for p in encoder.parameters():
    p.require_grad = False
""", fixed="""
import torch
import torch.nn as nn
encoder = nn.Linear(4, 4)
scale = torch.ones(4)
scale.requires_grad = True
for p in encoder.parameters():
    p.requires_grad = False
""", count=2, evidence=Evidence.MUST)]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]  # type: ignore[attr-defined]
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute) and t.attr == "require_grad" and isinstance(t.ctx, ast.Store):
                    _note_receiver(ctx, t.value)
                    text = f"{ctx.locator.source(t.value)}.requires_grad"
                    yield self.hit(t, edits=[ctx.locator.replace(t, text)], evidence=Evidence.MUST)


def _note_receiver(ctx: FileContext, obj: ast.AST) -> None:
    """Any object takes a ``require_grad`` attribute: a typo only on a tensor or a module."""
    loops = [owner for owner, _ in ctx.bindings(obj)
             if isinstance(obj, ast.Name) and parameter_loop_binding(ctx, owner, obj.id)]
    if loops:
        for owner in loops:
            note_parameters_of(ctx, owner)
    elif not ctx.kinds(obj) & {TENSOR, GRAD_LEAF, MODULE}:
        ctx.note(Evidence.UNRESOLVED, f"`{ctx.segment(obj)}` is not resolved to a tensor or module")
