from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import FileContext, argument, is_torch_nn_class, keyword
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules.distributed._util import (DDP_CALLEES, dotted_name, exclusive_branches, is_ddp_call,
                                                    method_calls_after, rooted_in, target_names, trained_after,
                                                    wrapped_names)

_MOVES = frozenset({"to", "cuda", "xpu", "mps", "to_empty"})
_CPU_KEEPING = frozenset({"train", "eval", "float", "double", "half", "bfloat16", "requires_grad_", "cpu"})
# a device index (``.to(rank)``) is an accelerator, never the CPU
_INDEX_NAMES = frozenset({"rank", "local_rank", "gpu", "gpu_id", "device_id", "device_idx", "gpu_idx", "local_gpu"})


class DeviceMovedAfterDdpWrap(Rule):
    """A module wrapped in `DistributedDataParallel` on the CPU is moved to another device afterwards
    (`ddp.to(device)`, `.cuda()`).

    ## What it does
    Flags `.to(device)`, `.cuda()` (and `.xpu()`, `.to_empty(device=...)`) called on a module after it
    was wrapped in `DistributedDataParallel` — on the wrapped model, the DDP object or `ddp.module` —
    when the module was on the CPU at the wrap and the DDP model is called or back-propagated
    afterwards. "On the CPU at the wrap" is what the file shows: the module is built there by a
    constructor (a class of this file that does not move itself, or a `torch.nn` layer without
    `device=`), nothing moves it before the wrap, and DDP is given no `device_ids` (with them, torch
    refuses a CPU module). A module of unknown origin (a parameter, a factory's result) is not
    flagged: it is usually on its device already, and moving it there again is a no-op.

    `error` when the target device is surely not the CPU (`.cuda()`, a `"cuda..."` string, an
    integer or a rank index); `warning` when it is a variable that may name the CPU (`device =
    "cuda" if available else "cpu"`), or when the move runs on some paths only. Dtype conversions
    are TP601's.

    ## Why is this bad?
    DDP hooks its gradient all-reduce onto each parameter's gradient accumulator when it is built,
    and a move to another device leaves those hooks behind. On torch 2.13, in the proof (2 gloo
    ranks on CPU; the device changed from `cpu` to `meta`, the one other device a CPU-only build
    has), every backward after `ddp.to("meta")` or `model.to("meta")` ran without a single call of
    DDP's communication hook and without any error or warning, while `.to("cpu")` (no change) kept
    them. That move gives the module new `Parameter` objects. A move from CPU to CUDA keeps the
    objects and swaps their data (`param.data = param.to(device)`); autograd then drops a
    parameter's accumulator because its device changed (`VariableHooks::set_data` in torch's
    `torch/csrc/autograd/variable.cpp`, read, not executed here — the same reset a dtype change
    makes, which TP601's proof runs), so the hooks are left behind the same way. Each rank then
    trains on its own gradients and the replicas drift apart. With the NCCL backend alone, DDP
    already fails when it broadcasts the CPU parameters at the wrap; with the default
    `cpu:gloo,cuda:nccl` backend the wrap succeeds and the loss of the all-reduce is silent.

    ## Fix safety
    No autofix: move the model first, then wrap it — `model.to(device)`, then
    `DDP(model, device_ids=[local_rank])`.
    """

    code = "TP606"
    category = Category.DISTRIBUTED
    severity = Severity.ERROR
    requires = (
        "the wrapper is a resolved `DistributedDataParallel` call without `device_ids`, around a module built in this "
        "file by a constructor that does not place it on a device, with no move before the wrap",
        "after it, the wrapped model (or the wrapper, or `.module`) is moved to a device, and the DDP model is then "
        "called or something back-propagated; for `error`, the device is surely not the CPU and the move runs whenever "
        "the wrap does",
    )
    facts = ("device-move-after-ddp-wrap-stops-all-reduce",)
    message = ("the module is moved to another device after being wrapped in DDP: its parameters get new gradient "
               "accumulators, gradients are no longer all-reduced and the replicas silently drift apart")
    fix_hint = "move the model first (`model.to(device)`), then wrap it: `DDP(model, device_ids=[local_rank])`"
    nodes = (ast.Call,)
    calls = DDP_CALLEES
    triggers = ("DistributedDataParallel",)

    valid = [
        """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
model = Net().to(local_rank)
model = DDP(model, device_ids=[local_rank])
model.to(local_rank)
for x, y in loader:
    criterion(model(x), y).backward()
""",
        """
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
def main(rank):
    net = nn.Linear(8, 2)
    net.cuda(rank)
    ddp = DistributedDataParallel(net)
    ddp.cuda(rank)
    for x in loader:
        ddp(x).sum().backward()
""",
        """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
def setup(model, device):
    model = DDP(model)
    model.to(device)
    return model
""",
        """
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
net = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
ddp = DDP(net)
ddp.to("cpu")
for x in loader:
    ddp(x).mean().backward()
""",
        """
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
net = nn.Linear(4, 4, device="cuda")
ddp = DDP(net)
ddp.to("cuda")
ddp(batch).sum().backward()
""",
        """
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
def export_after_training(loader):
    net = nn.Linear(4, 4)
    ddp = DDP(net)
    for x in loader:
        ddp(x).sum().backward()
    net.to("cuda")
    torch.save(net.state_dict(), "net.pt")
""",
        """
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
def worker(rank, loader):
    model = DDP(nn.Linear(4, 2))
    model.to(f"cpu:{rank}")
    for x in loader:
        model(x).sum().backward()
""",
    ]
    invalid = [
        """
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
    def forward(self, x):
        return self.fc(x)
model = Net()
model = DDP(model)
model.to("cuda:0")
for x, y in loader:
    criterion(model(x), y).backward()
""",
        """
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
def main(rank):
    net = nn.Linear(8, 2)
    ddp = DistributedDataParallel(net)
    ddp.cuda(rank)
    for x in loader:
        ddp(x).sum().backward()
""",
        Invalid("""
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
net = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
ddp = DDP(net)
ddp.to(device)
for x in loader:
    ddp(x).mean().backward()
""", severity=Severity.WARNING, evidence=Evidence.MAY),  # the device may be the CPU: then a no-op
        """
import torch
import torch.nn as nn
import torch.nn.parallel as par
def train(local_rank, loader):
    model = par.DistributedDataParallel(nn.Linear(4, 1).train())
    model.module.to(local_rank)
    for x in loader:
        model(x).sum().backward()
""",
        """
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
ddp = DDP(nn.Linear(4, 4)).to("cuda")
ddp(batch).sum().backward()
""",
        Invalid("""
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
def run(args, loader):
    net = nn.Linear(4, 4)
    ddp = DDP(net)
    if args.gpu:
        net.cuda()
    for x in loader:
        ddp(x).sum().backward()
""", severity=Severity.WARNING, evidence=Evidence.MAY),  # moved on the --gpu path only
        """
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
def worker(rank, loader):
    model = DDP(nn.Linear(4, 2))
    model.to(f"cuda:{rank}")
    for x in loader:
        model(x).sum().backward()
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if not is_ddp_call(ctx, node) or argument(node, "device_ids", 1) is not None:
            return
        wrapped = argument(node, "module", 0)
        if wrapped is None or not _on_cpu_at(wrapped, node, ctx):
            return
        inner = dotted_name(wrapped)
        outer = target_names(ctx, node)
        parent = ctx.parent(node)
        if (isinstance(parent, ast.Attribute) and isinstance(call := ctx.parent(parent), ast.Call)
                and call.func is parent):
            # ``DDP(model).to(device)`` moves the fresh wrapper itself
            if parent.attr in _MOVES and (sure := _to_device(call, ctx)) is not None:
                if not sure:
                    ctx.note(Evidence.MAY, "the device may be the CPU the module is already on (then a no-op)")
                yield self.hit(call, subject=inner, evidence=Evidence.MUST)
                return
            outer |= target_names(ctx, call)
        roots, users = wrapped_names(inner, outer)
        if not roots:
            return
        scope = ctx.scope(node)
        anchor = ctx.statement(node)
        for sub, receiver in method_calls_after(ctx, scope, anchor):
            assert isinstance(sub.func, ast.Attribute)
            if sub.func.attr not in _MOVES or receiver not in roots or exclusive_branches(ctx, node, sub):
                continue
            sure = _to_device(sub, ctx)
            if sure is None or not trained_after(ctx, scope, sub, users):
                continue
            if not sure:
                ctx.note(Evidence.MAY, "the device may be the CPU the module is already on (then a no-op)")
            if ctx.conditional(sub, within=ctx.parent(anchor)):
                ctx.note(Evidence.MAY, "the move runs on some paths only")
            yield self.hit(sub, subject=receiver, evidence=Evidence.MUST)
            return


def _to_device(call: ast.Call, ctx: FileContext) -> bool | None:
    """Whether ``call`` moves to a device that is surely not the CPU (True), may be the CPU (False), or
    is not a device move at all (None: ``.to(torch.float16)``, ``.to("cpu")``)."""
    method = call.func.attr  # type: ignore[attr-defined]
    if method in ("cuda", "xpu", "mps"):
        return True
    target = keyword(call, "device") if method == "to_empty" else argument(call, "device", 0)
    if target is None:
        return None
    values = ctx.values(target) if isinstance(target, ast.Name) else [target]
    verdicts = {_device_value(v, target, ctx) for v in values}
    if verdicts == {None}:
        return None  # a dtype, or the CPU on every path
    return verdicts == {True}


def _device_value(value: ast.AST, name: ast.AST, ctx: FileContext) -> bool | None:
    """True: an accelerator; False: unknown (may be the CPU); None: the CPU, or not a device."""
    if isinstance(value, ast.Constant):
        if isinstance(value.value, bool):
            return None
        if isinstance(value.value, int):
            return True
        if isinstance(value.value, str):
            return None if value.value.split(":")[0] == "cpu" else True
        return None
    if isinstance(value, ast.JoinedStr) and value.values and isinstance(value.values[0], ast.Constant):
        head = str(value.values[0].value)  # f"cuda:{rank}"
        return None if head.split(":")[0] == "cpu" else True if ":" in head else False
    if isinstance(value, ast.Call) and ctx.call_name(value) == "torch.device" and value.args:
        return _device_value(value.args[0], name, ctx)
    qn = ctx.resolve(value)
    if qn is not None and qn.startswith("torch.") and not qn.startswith("torch.device"):
        return None  # ``torch.float16`` and the like: a dtype (TP601's)
    term = value.id if isinstance(value, ast.Name) else value.attr if isinstance(value, ast.Attribute) else ""
    if term in _INDEX_NAMES:
        return True
    return False


def _on_cpu_at(wrapped: ast.expr, wrap: ast.Call, ctx: FileContext) -> bool:
    """Whether the module ``wrapped`` is on the CPU when DDP wraps it, as the file shows: built here by a
    constructor that places nothing on a device, and not moved before the wrap."""
    values = [wrapped] if isinstance(wrapped, ast.Call) else [v for _, v in ctx.bindings(wrapped)] if isinstance(
        wrapped, ast.Name) else []
    if not values or not all(_cpu_module(v, ctx) for v in values):
        return False
    if isinstance(wrapped, ast.Name):
        anchor = ctx.statement(wrap)
        for sub in ctx.walk_scope(ctx.scope(wrap)):
            if (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in _MOVES
                    and sub.lineno <= anchor.lineno and dotted_name(sub.func.value) is not None
                    and rooted_in(dotted_name(sub.func.value), {wrapped.id})):
                return False  # moved (or maybe moved) before the wrap
    return True


def _cpu_module(value: ast.AST | None, ctx: FileContext) -> bool:
    while (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
           and value.func.attr in _CPU_KEEPING):
        value = value.func.value
    if not isinstance(value, ast.Call) or any(k.arg in ("device", None) for k in value.keywords):
        return False
    qn = ctx.call_name(value)
    if qn is not None:
        return is_torch_nn_class(qn) and qn != "torch.nn.Parameter"
    if isinstance(value.func, ast.Name) and value.func.id in ctx.module_classes:
        cls = ctx.module_classes[value.func.id]
        return not any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _MOVES
                       and isinstance(n.func.value, (ast.Name, ast.Call))
                       and ctx.segment(n.func.value) in ("self", "super()")
                       for n in ast.walk(cls))  # a class that moves itself (``self.to(device)``)
    return False
