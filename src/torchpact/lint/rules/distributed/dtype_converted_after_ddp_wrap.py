from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import FileContext, argument
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules.distributed._util import (DDP_CALLEES, dotted_name, exclusive_branches, is_ddp_call,
                                                    method_calls_after, rooted_in, target_names, trained_after,
                                                    wrapped_names)

CONVERTING_METHODS = {"half", "double", "bfloat16"}
# dtypes that change a float32 model's parameters (float32 itself is a no-op on a float32 model)
OTHER_DTYPES = {
    "torch.float16", "torch.half", "torch.bfloat16", "torch.float64", "torch.double",
    "torch.float8_e4m3fn", "torch.float8_e5m2",
}


class DtypeConvertedAfterDdpWrap(Rule):
    """A module is converted to another dtype (`.half()`, `.to(torch.bfloat16)`, ...) after being wrapped in
    `DistributedDataParallel`.

    ## What it does
    Flags `.half()`, `.double()`, `.bfloat16()`, and `.to(...)` / `.type(...)` with a non-float32
    dtype, called on a module after it was wrapped in `DistributedDataParallel` (on the wrapped
    model, the DDP object, `ddp.module`, or a submodule of them), when the DDP model is still called
    or back-propagated afterwards in the same function. Conversions done before wrapping, and
    device moves (`.to(device)`, `.cuda()`: TP606's), are not flagged.

    ## Why is this bad?
    DDP hooks the gradient all-reduce onto each parameter's gradient accumulator when it is built.
    A dtype conversion swaps every parameter's data (`param.data = param.half()`), and autograd
    drops a parameter's accumulator when the dtype changes, so the hooks are left on accumulators
    no backward pass reaches. On torch 2.13 (2 gloo ranks, `ddp = DDP(model); model.double()`)
    every backward runs without a single all-reduce and without any error or warning: each rank's
    `.grad` is its own local gradient, and after the first optimizer step the replicas silently
    drift apart. `ddp.double()` and `ddp.module.half()` do the same. A conversion that does not change
    the dtype (`.float()` on a float32 model, `.to("cpu")` on a CPU model) is a no-op and keeps the
    all-reduce; a real device move after wrapping loses the hooks as well, which TP606 flags where
    the file shows the module was on the CPU at the wrap.

    ## Fix safety
    No autofix: the conversion has to move before the `DistributedDataParallel(...)` line. Convert
    (or use autocast / DDP's `mixed_precision`) first, then wrap.
    """

    code = "TP601"
    category = Category.DISTRIBUTED
    severity = Severity.ERROR
    requires = (
        "the wrapper is a resolved `DistributedDataParallel` call",
        "after it, the wrapped model (or the wrapper, or `.module`) is converted to another dtype by a statement "
        "that runs whenever the wrap does (for `error`), and the DDP model is then called or something back-propagated",
    )
    facts = ("dtype-conversion-after-ddp-wrap-stops-all-reduce",)
    message = ("the module is converted to another dtype after being wrapped in DDP: gradients are no longer "
               "all-reduced and the replicas silently drift apart")
    fix_hint = "convert the model first (`model.half()` / `model.to(dtype)`), then wrap it in `DistributedDataParallel`"
    nodes = (ast.Call,)
    calls = DDP_CALLEES
    triggers = ("DistributedDataParallel",)

    valid = [
        """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
model = Net().to(device).half()
ddp = DDP(model, device_ids=[rank])
for x, y in loader:
    loss = criterion(ddp(x.half()), y)
    loss.backward()
""",
        """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
def train(model, rank, loader):
    ddp = DDP(model)
    model.to(rank)
    model.float()
    for x, y in loader:
        ddp(x).sum().backward()
""",
        """
import torch
import torch.nn.parallel as par
def export(model, loader):
    ddp = par.DistributedDataParallel(model)
    for x in loader:
        ddp(x).sum().backward()
    model.half()
    torch.save(model.state_dict(), "model_fp16.pt")
""",
        """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
ddp = DDP(model)
for x in loader:
    out = ddp(x)
    out.half().sum().backward()
""",
        """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
def setup(model, args):
    if args.distributed:
        model = DDP(model)
    else:
        model.half()
    for x in loader:
        model(x).sum().backward()
""",
    ]
    invalid = [
        """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
model = Net()
ddp = DDP(model)
model.half()
for x, y in loader:
    loss = criterion(ddp(x.half()), y)
    loss.backward()
""",
        """
import torch
import torch.nn as nn
def main(model, loader, rank):
    model = nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    model.module.to(torch.bfloat16)
    for x in loader:
        model(x).sum().backward()
""",
        """
import torch
from torch.nn.parallel import DistributedDataParallel
ddp_model = DistributedDataParallel(net).double()
ddp_model(torch.randn(2, 4, dtype=torch.float64)).sum().backward()
""",
        Invalid("""
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
def train(model, loader, args):
    ddp = DDP(model)
    if args.bf16:
        model.to(torch.bfloat16)
    for x in loader:
        ddp(x).sum().backward()
""", severity=Severity.WARNING, evidence=Evidence.MAY),  # converted on the bf16 path only
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if not is_ddp_call(ctx, node):
            return
        wrapped = argument(node, "module", 0)
        inner = dotted_name(wrapped) if wrapped is not None else None
        outer = target_names(ctx, node)
        # `DDP(model).half()` converts the fresh wrapper itself
        parent = ctx.parent(node)
        if (isinstance(parent, ast.Attribute) and isinstance(call := ctx.parent(parent), ast.Call)
                and call.func is parent):
            if _changes_dtype(call, ctx):
                yield self.hit(call, subject=inner, evidence=Evidence.MUST)
            outer |= target_names(ctx, call)
        roots, users = wrapped_names(inner, outer)
        if not roots:
            return
        scope = ctx.scope(node)
        anchor = ctx.statement(node)
        for sub, receiver in method_calls_after(ctx, scope, anchor):
            if not rooted_in(receiver, roots) or not _changes_dtype(sub, ctx):
                continue
            if exclusive_branches(ctx, node, sub):
                continue  # `if distributed: DDP(model) else: model.half()`
            if receiver not in roots and not isinstance(ctx.parent(sub), ast.Expr):
                continue  # `x = model.weight.half()` makes a copy of a tensor; only a statement converts a submodule
            if inner and _converted_before(ctx, scope, inner, sub, anchor):
                continue  # same conversion before wrapping: this one is a no-op
            if trained_after(ctx, scope, sub, users):
                if ctx.conditional(sub, within=ctx.parent(anchor)):
                    ctx.note(Evidence.MAY, "the conversion runs on some paths only")
                yield self.hit(sub, subject=receiver, evidence=Evidence.MUST)


def _changes_dtype(call: ast.Call, ctx: FileContext) -> bool:
    assert isinstance(call.func, ast.Attribute)
    method = call.func.attr
    if method in CONVERTING_METHODS:
        return True
    if method in ("to", "type"):
        candidates = [*call.args, *(k.value for k in call.keywords if k.arg in ("dtype", "dst_type"))]
        return any(ctx.resolve(a) in OTHER_DTYPES for a in candidates)
    return False


def _converted_before(ctx: FileContext, scope: ast.AST, inner: str, conversion: ast.Call, anchor: ast.AST) -> bool:
    assert isinstance(conversion.func, ast.Attribute)
    for sub in ctx.walk_scope(scope):
        if (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.lineno <= anchor.lineno
                and sub.func.attr == conversion.func.attr and dotted_name(sub.func.value) == inner
                and ast.dump(sub) == ast.dump(conversion)):
            return True
    return False
