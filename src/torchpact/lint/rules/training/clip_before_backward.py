from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import SCALER, FileContext
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules.training._util import (
    innermost_training_loop,
    is_backward,
    local_callees,
    loop_nodes,
    reaches,
    src,
    stepped_optimizer,
    unconditional_in,
)

CLIPS = {
    "torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_value_", "torch.nn.utils.clip_grad_norm",
    "torch.nn.utils.clip_grad.clip_grad_norm_", "torch.nn.utils.clip_grad.clip_grad_value_",
}
_CLIP_METHODS = {"clip_grad_norm_", "clip_grad_value_"}
_CLIP_NAMES = (*_CLIP_METHODS, "clip_grad_norm", "unscale_")


class ClipBeforeBackward(Rule):
    """Gradients are clipped (or unscaled) before the `backward()` whose gradients the next `step()` uses.

    ## What it does
    Flags `torch.nn.utils.clip_grad_norm_` / `clip_grad_value_` and `scaler.unscale_(optimizer)` when,
    following the statements forward from the call — through the rest of the loop body and around to
    the start of the next iteration when it is in a training loop, to the end of the function
    otherwise, leaving out the other branch of an `if` the call is in — a `backward()` comes before
    the next `optimizer.step()` / `scaler.step(optimizer)`.
    The condition it needs: the gradients that step applies are (at least partly) made after the
    clipping, so the clipping never saw them. The rotated loop `clip; step; zero_grad; backward`
    (each step applies the gradients clipped just before it) and clipping after `backward()` are not
    flagged. A `backward()` in a function of this file that the loop calls counts. The finding is
    a warning only where that `backward()` runs on some paths only of the iteration (`if` between).

    ## Why is this bad?
    What the clipping acts on is what `.grad` holds at that moment. Before `backward()` that is
    nothing (`zero_grad()` sets `.grad` to None on torch 2.13) or the previous step's gradients, which
    `backward()` then replaces or adds to. On torch 2.13:
    - `clip_grad_norm_` on no gradients returns a norm of 0 and does nothing: in the proof the
      weights after three SGD steps are bit-for-bit those of an unclipped run, although the real
      gradient norm is above 7000 and `max_norm` is 1 — exploding gradients are not contained;
    - `clip_grad_value_` on no gradients raises a `RuntimeError`
      (`Expected !nested_tensorlist[0].empty() to be true`) at the first iteration;
    - `scaler.unscale_(optimizer)` before the first `scaler.scale(loss)` raises an `AssertionError`
      (`Attempted unscale_ but _scale is None`); after it but before `backward()` it finds nothing to
      unscale, and `scaler.step` then raises `No inf checks were recorded for this optimizer` — or,
      where `zero_grad(set_to_none=False)` left zeros in `.grad`, it "unscales" the zeros, marks the
      optimizer unscaled, and the step silently applies the new gradients still multiplied by the
      scale (1024 times the real gradient in the proof).
    The run check of the same code sees the clipping on missing gradients at run time.

    ## Fix safety
    No autofix: move the clipping (and `scaler.unscale_`) to after `loss.backward()` and before
    `optimizer.step()`: `backward` → `unscale_` → `clip_grad_norm_` → `step`.
    """

    code = "TP461"  # shared with the run check of the same pattern (watch/watchers/clip_timing.py)
    category = Category.TRAINING
    severity = Severity.WARNING
    requires = (
        "the call is torch's `clip_grad_norm_` / `clip_grad_value_` (resolved through its import) or a GradScaler's "
        "`unscale_`",
        "after it, a `backward()` runs before the next `optimizer.step()` (through the loop's next iteration), and "
        "the step exists",
    )
    message = ("gradients are clipped before backward(): the clipping acts on no gradients or on the previous "
               "step's, and the step then applies the new gradients unclipped")
    fix_hint = ("clip after `loss.backward()` and before `optimizer.step()` "
                "(`backward`, `unscale_`, `clip_grad_norm_`, `step`)")
    nodes = (ast.Call,)
    calls = frozenset({*_CLIP_METHODS, "clip_grad_norm", "unscale_"})
    triggers = ("clip_grad", "unscale_")

    valid = [
        """
import torch
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
""",
        """
from torch.nn.utils import clip_grad_value_
def fit(net, batches, opt, crit):
    for inputs, targets in batches:
        clip_grad_value_(net.parameters(), 0.5)
        opt.step()
        opt.zero_grad()
        crit(net(inputs), targets).backward()
""",
        """
import torch
scaler = torch.amp.GradScaler("cuda")
def train_step(model, batch, opt):
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda"):
        loss = model(batch).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    scaler.step(opt)
    scaler.update()
""",
        """
import torch.nn as nn
def run(model, data, optim, accum):
    for i, (x, y) in enumerate(data):
        loss = nn.functional.mse_loss(model(x), y) / accum
        loss.backward()
        if (i + 1) % accum == 0:
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optim.step()
            optim.zero_grad()
""",
        """
import torch
def _backward(loss):
    loss.backward()
def loop(model, loader, opt):
    for x in loader:
        opt.zero_grad()
        _backward(model(x).sum())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
        opt.step()
""",
        """
import torch
def update(model, loss, opt, scaler, amp):
    opt.zero_grad()
    if amp:
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
    else:
        loss.backward()  # the other branch: never after the unscale_ on one pass
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if amp:
        scaler.step(opt)
        scaler.update()
    else:
        opt.step()
""",
        """
import torch
def report_grad_norm(model):
    # measuring, not training: no backward follows before a step here
    return torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
""",
    ]
    invalid = [
        Invalid("""
import torch
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    loss.backward()
    optimizer.step()
""", severity=Severity.INFO, evidence=Evidence.UNRESOLVED),  # `optimizer` is one by its name only
        """
import torch
from torch.nn.utils import clip_grad_value_
def fit(net, batches, crit):
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for inputs, targets in batches:
        opt.zero_grad()
        clip_grad_value_(net.parameters(), 0.5)
        crit(net(inputs), targets).backward()
        opt.step()
""",
        Invalid("""
import torch
def train_step(model, batch, opt):
    scaler = torch.amp.GradScaler("cuda")
    opt = torch.optim.AdamW(model.parameters())
    opt.zero_grad(set_to_none=True)
    scaled = scaler.scale(model(batch).mean())
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    scaled.backward()
    scaler.step(opt)
    scaler.update()
""", count=2),  # the unscale_ and the clipping
        Invalid("""
import torch
import torch.nn as nn
def run(model, data, accum):
    optim = torch.optim.Adam(model.parameters())
    for i, (x, y) in enumerate(data):
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        loss = nn.functional.mse_loss(model(x), y) / accum
        if i % accum == 0:
            loss.backward()
        optim.step()
""", severity=Severity.WARNING, evidence=Evidence.MAY),  # the backward runs on some iterations only
        """
import torch
def _backward(loss):
    loss.backward()
def loop(model, loader):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = 0
    while step < 100:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
        opt.zero_grad()
        _backward(model(next(loader)).sum())
        opt.step()
        step += 1
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if not _clips_or_unscales(ctx, node):
            return
        loop = innermost_training_loop(ctx, node)
        if loop is not None:
            events = _events(ctx, loop_nodes(loop))
            index = _index_of(events, node)
            if index < 0:
                return
            ahead = events[index + 1:] + events[:index]  # the rest of this iteration, then the next one's start
        else:
            scope = ctx.scope(node)
            body = scope.body if isinstance(getattr(scope, "body", None), list) else []
            events = _events(ctx, body)
            index = _index_of(events, node)
            if index < 0:
                return
            ahead = events[index + 1:]
        # what runs after it on the same pass (not the other branch of an ``if`` it is in)
        ahead = [(kind, event) for kind, event in ahead if not ctx.exclusive(node, event)]
        first = next(((kind, event) for kind, event in ahead if kind != "clip"), None)
        if first is None or first[0] != "backward":
            return
        step = next((event for kind, event in ahead if kind == "step"), None)
        if step is None or stepped_optimizer(ctx, step) is None:  # (noted again: the finding relies on it)
            return
        backward = first[1]
        sure = unconditional_in(ctx, backward, loop) if loop is not None else not ctx.conditional(backward)
        if not sure:
            ctx.note(Evidence.MAY, "the backward() after the clipping runs on some paths only")
        yield self.hit(node, subject=src(ctx, node.func), evidence=Evidence.MUST)


def _clips_or_unscales(ctx: FileContext, call: ast.Call) -> bool:
    if ctx.call_name(call) in CLIPS:
        return True
    func = call.func
    if not isinstance(func, ast.Attribute) or ctx.resolve(func) is not None:
        return False
    if func.attr == "unscale_" and len(call.args) + len(call.keywords) == 1:
        if SCALER in ctx.kinds(func.value):
            return True
        name = src(ctx, func.value)
        if "scaler" in name.lower():
            ctx.note(Evidence.UNRESOLVED, f"`{name}` is taken for a GradScaler by its name")
            return True
    if func.attr in _CLIP_METHODS and not ctx.kinds(func.value):
        # ``accelerator.clip_grad_norm_(...)``, ``fabric.clip_gradients``-style wrappers of torch's
        ctx.note(Evidence.UNRESOLVED, f"`{src(ctx, func)}` is taken for torch's gradient clipping by its name")
        return True
    return False


def _index_of(events: list[tuple[str, ast.AST]], node: ast.AST) -> int:
    return next((i for i, (_, n) in enumerate(events) if n is node), -1)


def _events(ctx: FileContext, body: list[ast.AST]) -> list[tuple[str, ast.AST]]:
    """('clip' | 'backward' | 'step', node) in source order; what they rest on is not noted here (a
    finding notes the step it relies on itself)."""
    def collect() -> list[tuple[str, ast.AST]]:
        out: list[tuple[str, ast.AST]] = []
        for node in ctx.walk_scope(body):
            if not isinstance(node, ast.Call):
                continue
            if is_backward(ctx, node) or (local_callees(ctx, node)
                                          and reaches(ctx, [node], lambda n: is_backward(ctx, n))):
                out.append(("backward", node))
            elif stepped_optimizer(ctx, node) is not None:
                out.append(("step", node))
            elif isinstance(node.func, (ast.Attribute, ast.Name)) and (
                    getattr(node.func, "attr", None) or getattr(node.func, "id", None)) in _CLIP_NAMES:
                out.append(("clip", node))
        out.sort(key=lambda e: (e[1].lineno, e[1].col_offset))  # type: ignore[attr-defined]
        return out
    return ctx.unnoted(collect)  # type: ignore[return-value]
