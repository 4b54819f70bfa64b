from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import SCALER, FileContext
from torchpact.lint.rule import Hit, Invalid, Rule, last_names

CLIPS = {"torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_value_", "torch.nn.utils.clip_grad_norm"}


class ClipBeforeUnscale(Rule):
    """Gradients are clipped while a GradScaler still has them scaled (no `scaler.unscale_(optimizer)`).

    ## What it does
    Flags `clip_grad_norm_` / `clip_grad_value_` in a function (or module body) that calls
    `scaler.scale(loss).backward()` and never `scaler.unscale_(...)`.

    ## Why is this bad?
    After `scaler.scale(loss).backward()` every gradient is multiplied by the loss scale (65536 at
    first). Clipping then compares the *scaled* norm with `max_norm`: on torch 2.13, with a
    scale of 1024, `clip_grad_norm_(params, 1.0)` measures a norm 1024 times too large and
    shrinks the gradients 1024 times more than intended, so after `scaler.step` divides by the
    scale the update is a thousandth of what clipping should allow — training crawls. The AMP
    examples in torch's documentation call `scaler.unscale_(optimizer)` first for this reason.

    ## Fix safety
    No autofix: insert `scaler.unscale_(optimizer)` right before the clipping call, once per
    optimizer per step (`scaler.step` then knows not to unscale again).
    """

    code = "TP331"
    category = Category.NUMERICS
    severity = Severity.WARNING
    requires = (
        "the function scales the loss with a GradScaler and clips gradients without `unscale_`",
    )
    message = "gradients are clipped while still multiplied by the GradScaler's scale: clipping acts on the wrong norm"
    fix_hint = "call `scaler.unscale_(optimizer)` before clipping"
    nodes = (ast.Call,)
    calls = last_names(CLIPS)
    triggers = ("clip_grad",)

    valid = ["""
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    scaler.scale(loss_fn(model(x), y)).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
""", """
import torch
for x, y in loader:
    loss_fn(model(x), y).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
"""]
    invalid = ["""
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    scaler.scale(loss_fn(model(x), y)).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
""", Invalid("""
import torch
def run_batch(model, loss, optimizer, scaler, use_amp, clip):
    optimizer.zero_grad(set_to_none=True)
    if use_amp:
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()  # the plain path: nothing is scaled here
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
""", count=1, severity=Severity.INFO)]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if ctx.call_name(node) not in CLIPS:
            return
        scope = ctx.scope(node)
        calls = [n for n in ctx.walk_scope(scope.body if isinstance(scope.body, list) else [scope.body])
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
        if any(c.func.attr == "unscale_" for c in calls):
            return
        scaled_backward = any(
            c.func.attr == "backward" and isinstance(c.func.value, ast.Call)
            and isinstance(c.func.value.func, ast.Attribute) and c.func.value.func.attr == "scale"
            and not _exclusive(ctx, c, node)
            and SCALER in ctx.kinds(c.func.value.func.value) for c in calls)
        if scaled_backward:
            yield self.hit(node)


def _exclusive(ctx: FileContext, a: ast.AST, b: ast.AST) -> bool:
    """Whether ``a`` and ``b`` sit in different branches of one ``if`` (the AMP and the plain path)."""
    branch_of: dict[int, str] = {}
    child = a
    for anc in ctx.ancestors(a):
        if isinstance(anc, ast.If):
            branch_of[id(anc)] = "body" if child in anc.body else "orelse" if child in anc.orelse else "test"
        child = anc
    child = b
    for anc in ctx.ancestors(b):
        if isinstance(anc, ast.If) and id(anc) in branch_of:
            side = "body" if child in anc.body else "orelse" if child in anc.orelse else "test"
            return "test" not in (side, branch_of[id(anc)]) and side != branch_of[id(anc)]
        child = anc
    return False
