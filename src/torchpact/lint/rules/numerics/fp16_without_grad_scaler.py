from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, is_const, keyword
from torchpact.lint.rule import Invalid, Hit, Rule, last_names
from torchpact.lint.rules.numerics._util import (
    backward_follows,
    half_cast,
    is_float16,
    is_model,
    scope_trains,
    uses_loss_scaling,
)

AUTOCAST = {"torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast"}
CUDA_AUTOCAST = {"torch.cuda.amp.autocast", "torch.cuda.amp.autocast_mode.autocast"}


class Fp16WithoutGradScaler(Rule):
    """A model is trained in float16 (autocast or `.half()`) with no loss scaling.

    ## What it does
    Flags `torch.autocast("cuda")` (torch 2.13's default CUDA autocast dtype is float16) /
    `torch.autocast(..., dtype=torch.float16)` / `torch.cuda.amp.autocast()`, and `model.half()` /
    `model.to(torch.float16)`, in a function that also calls `backward()` and `optimizer.step()`,
    when nothing in the file scales the loss (no `GradScaler`, no `scaler`, no apex `scale_loss`).
    bfloat16 is not flagged: it has float32's exponent range. `accelerator.backward(loss)` (which
    scales itself) does not count as a backward call.

    ## Why is this bad?
    float16's smallest subnormal is 6e-08, and anything below half of it rounds to exactly 0: the
    backward pass runs the autocast ops in float16, and every activation gradient under about 3e-08
    is lost. On torch 2.13, a two-layer model under `torch.autocast(dtype=torch.float16)` with a loss of
    scale 1e-7 gets a first-layer weight gradient that is 100% zeros, where float32, bfloat16, or
    float16 with `GradScaler` all give gradients of about 2.5e-08. Nothing warns: the model simply
    stops learning from small gradients. Pure float16 parameters (`.half()`) are worse: the same
    underflow, and `GradScaler` cannot help them — it raises "Attempting to unscale FP16 gradients."

    ## Fix safety
    No autofix. Create `scaler = torch.amp.GradScaler("cuda")` and use `scaler.scale(loss).backward()`,
    `scaler.step(optimizer)`, `scaler.update()`; or use `dtype=torch.bfloat16` where the hardware
    has it. For `.half()` models, keep float32 parameters and run the forward under autocast.
    """

    code = "TP304"
    category = Category.NUMERICS
    severity = Severity.WARNING
    requires = (
        "the function casts to or autocasts in float16, calls `backward()` and steps an optimizer",
        "nothing in the file scales the loss",
    )
    facts = ("fp16-gradients-underflow-without-scaling",)
    message = ("float16 training without loss scaling: gradients below float16's range (about 3e-08) "
               "flush to zero in the backward pass and are silently lost")
    fix_hint = ("use torch.amp.GradScaler (scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()) "
                "or autocast to torch.bfloat16")
    nodes = (ast.Call,)
    calls = last_names(AUTOCAST, CUDA_AUTOCAST) | {"half", "to", "type"}  # autocast, or half_cast
    triggers = ("autocast", "half", "float16")

    valid = [
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        """
import torch
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
        loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
""",
        """
import torch
@torch.no_grad()
def evaluate(model, loader):
    model.half()
    with torch.cuda.amp.autocast():
        return [model(x) for x, _ in loader]
""",
        """
import torch
def train(model, loader, optimizer, accelerator):
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
""",
    ]
    invalid = [
        Invalid("""
import torch
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
""", severity=Severity.INFO),
        Invalid("""
from torch.cuda.amp import autocast
def train_epoch(net, loader, optimizer, criterion):
    for x, y in loader:
        with autocast():
            loss = criterion(net(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
""", severity=Severity.INFO),
        """
import torch
model = Net().cuda()
model.half()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    loss = model(x.half(), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        qn = ctx.call_name(node)
        if qn in AUTOCAST or qn in CUDA_AUTOCAST:
            if not self._fp16_autocast(node, qn, ctx):
                return
            kind = "autocast"
        elif half_cast(ctx, node) and is_model(ctx, node.func.value):  # type: ignore[attr-defined]
            kind = "half"
        else:
            return
        scope = ctx.scope(node)
        if ctx.grad_disabled(node) or not scope_trains(ctx, scope) or uses_loss_scaling(ctx):
            return
        if kind == "half":
            if not backward_follows(ctx, node, scope):
                return  # cast for inference or export after training
            yield self.hit(node, message=(
                "the model is trained with float16 parameters and no loss scaling: gradients below about "
                "3e-08 flush to zero, and GradScaler cannot unscale float16 gradients"),
                fix_hint="keep float32 parameters; run the forward under torch.autocast with a GradScaler "
                         "(or use bfloat16)")
        else:
            yield self.hit(node)

    @staticmethod
    def _fp16_autocast(call: ast.Call, qn: str, ctx: FileContext) -> bool:
        if qn in CUDA_AUTOCAST:
            enabled = call.args[0] if call.args else keyword(call, "enabled")
            dtype = call.args[1] if len(call.args) > 1 else keyword(call, "dtype")
            device = None
        else:
            device = call.args[0] if call.args else keyword(call, "device_type")
            dtype = call.args[1] if len(call.args) > 1 else keyword(call, "dtype")
            enabled = call.args[2] if len(call.args) > 2 else keyword(call, "enabled")
        if enabled is not None and is_const(enabled, False):
            return False
        if dtype is not None:
            return is_float16(ctx, dtype)
        # no dtype: float16 for torch.cuda.amp.autocast and for device "cuda"
        return qn in CUDA_AUTOCAST or is_const(device, "cuda")
