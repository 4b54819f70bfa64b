from __future__ import annotations

import ast
from typing import Iterator

from torchpact.lint.callsites import passed_values
from torchpact.lint.context import DDP, FileContext
from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules.distributed._util import DDP_CLASSES, dotted_name
from torchpact.lint.analysis.following import follows_definitions


class ForwardBypassesDdp(Rule):
    """The training forward pass calls `ddp_model.module(...)` instead of `ddp_model(...)`.

    ## What it does
    Flags `ddp.module(x)` and `ddp.module.forward(x)` where `ddp` was built with
    `DistributedDataParallel(...)`, in a function that calls `.backward()` with gradients enabled
    and never calls `ddp(...)` itself. Evaluation code (`no_grad`, no backward) and functions that
    also run the DDP forward (for example local micro-steps followed by one synchronised step) are
    not flagged.

    ## Why is this bad?
    DDP only arms its gradient all-reduce in its own `forward`: calling the inner module skips it,
    so the following `backward()` runs no collective at all. On torch 2.13 (2 gloo ranks, different
    data per rank) the profiler counts 0 `gloo:all_reduce` per step through `ddp.module(x)` (1
    through `ddp(x)`), and the gradients differ between ranks, with no error or warning: every rank takes its own
    optimizer step and the replicas silently drift apart, which is data parallelism only in name. (Local micro-steps
    through `.module` followed by one `ddp(...)` step are fine: the last backward all-reduces the accumulated `.grad`.)

    ## Fix safety
    No autofix. Calling `ddp(x)` gives the same outputs with the all-reduce, but DDP's forward also
    checks that every parameter takes part in the loss: a model with unused parameters then needs
    `find_unused_parameters=True` (or `static_graph=True`), which only its author can judge.
    """

    code = "TP602"
    category = Category.DISTRIBUTED
    severity = Severity.ERROR
    requires = (
        "the wrapper is a resolved `DistributedDataParallel` on every binding (for `error`)",
        "the function calls `.module(...)` / `.module.forward(...)` with gradients on, back-propagates, and "
        "never calls the wrapper itself",
    )
    facts = ("forward-through-module-skips-all-reduce",)
    message = ("the forward pass goes through `ddp.module(...)`, bypassing DDP: the backward pass all-reduces "
               "nothing and every rank trains on its own gradients")
    fix_hint = ("call the DDP wrapper (`ddp(x)`) for training forward passes; use `with ddp.no_sync():` "
                "to skip a sync on purpose")
    nodes = (ast.Call,)
    calls = frozenset({"forward", "module"})
    triggers = ("DistributedDataParallel",)

    valid = [
        """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
ddp = DDP(model)
for x, y in loader:
    loss = criterion(ddp(x), y)
    loss.backward()
    optimizer.step()
""",
        """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
def evaluate(model, loader):
    ddp = DDP(model)
    with torch.no_grad():
        return [ddp.module(x) for x in loader]
""",
        """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
def train(model, batches, optimizer):
    ddp = DDP(model)
    *local, last = batches
    for x in local:
        ddp.module(x).sum().backward()
    ddp(last).sum().backward()
    optimizer.step()
""",
        """
import torch
def train(model, loader, optimizer):
    for x in loader:
        model.module(x).sum().backward()
        optimizer.step()
""",
        """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
def train(model: DDP, loader, opt):
    for x in loader:
        model(x).sum().backward()
        opt.step()
""",
        """
import torch
import torch.nn as nn
def _train(wrapped, loader, opt):
    for x in loader:
        wrapped.module(x).sum().backward()
        opt.step()
_train(nn.DataParallel(nn.Linear(2, 2)), [], None)
""",
    ]
    invalid = [
        (
            """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
ddp = DDP(model)
for x, y in loader:
    out = ddp.module(x)
    loss = criterion(out, y)
    loss.backward()
    optimizer.step()
"""
        ),
        (
            """
import torch
import torch.nn as nn
def train(model, rank, loader, optimizer):
    model = nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    for x in loader:
        optimizer.zero_grad()
        model.module.forward(x).mean().backward()
        optimizer.step()
"""
        ),
        Invalid("""
import torch
from torch.nn.parallel import DistributedDataParallel
def train(net, loader, optimizer, world_size):
    if world_size > 1:
        wrapped = DistributedDataParallel(net)
    else:
        wrapped = make_local_wrapper(net)
    for x in loader:
        wrapped.module(x).sum().backward()
        optimizer.step()
""", severity=Severity.WARNING, evidence=Evidence.MAY),  # a DDP wrapper on one path only
        Invalid("""
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
def train(model: DDP, loader, opt):
    for x in loader:
        model.module(x).sum().backward()
        opt.step()
""", evidence=Evidence.MUST),  # the annotation says DDP
        Invalid("""
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
def _train(wrapped, loader, opt):
    for x in loader:
        wrapped.module(x).sum().backward()
        opt.step()
_train(DDP(nn.Linear(2, 2)), [], None)
""", evidence=Evidence.MUST),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "forward":
            func = func.value
        if not (isinstance(func, ast.Attribute) and func.attr == "module"):
            return
        wrapper = func.value
        name = dotted_name(wrapper)
        if name is None or DDP not in ctx.kinds(wrapper, hints=False) or not _built_by_ddp(ctx, wrapper):
            return
        if ctx.grad_disabled(node):
            return
        scope = ctx.scope(node)
        if not _backward_in(ctx, scope):
            return
        if any(isinstance(sub, ast.Call) and dotted_name(sub.func) == name for sub in ctx.walk_scope(scope)):
            return  # the DDP forward runs too: micro-steps through .module, or eval next to training
        yield self.hit(node, subject=name, evidence=Evidence.MUST)


@follows_definitions(False)
def _built_by_ddp(ctx: FileContext, expr: ast.AST, depth: int = 0) -> bool:
    """DistributedDataParallel (not DataParallel / FSDP) is among the values bound to ``expr``; for a
    parameter, its annotation (``model: DDP``) or a value this file's calls of its function pass."""
    if isinstance(expr, ast.Name) and depth < 4:
        binds = ctx.bindings(expr)
        if binds and all(isinstance(owner, ast.arg) for owner, _ in binds):
            if any(ctx.resolve(owner.annotation) in DDP_CLASSES for owner, _ in binds if owner.annotation is not None):
                return True
            return any(_built_by_ddp(ctx, v, depth + 1) for v in passed_values(ctx, expr) or ())
    return any(isinstance(v, ast.Call) and ctx.call_name(v) in DDP_CLASSES for v in ctx.values(expr))


def _backward_in(ctx: FileContext, scope: ast.AST) -> bool:
    return any(isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "backward"
               for sub in ctx.walk_scope(scope))
