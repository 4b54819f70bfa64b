from __future__ import annotations

import ast

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Invalid
from torchpact.lint.rules._api import ApiUse, call_text, respell

DEVICE = {"torch.cuda.amp.autocast": "cuda", "torch.cpu.amp.autocast": "cpu"}


class DeprecatedCudaAmpAutocast(ApiUse):
    """`torch.cuda.amp.autocast` / `torch.cpu.amp.autocast` is used instead of `torch.amp.autocast`.

    ## What it does
    Flags uses and imports of `torch.cuda.amp.autocast` and `torch.cpu.amp.autocast` (which
    TorchFix does not check).

    ## Why is this bad?
    On torch 2.13 both emit `FutureWarning: torch.cuda.amp.autocast(args...) is deprecated. Please
    use torch.amp.autocast('cuda', args...) instead.` every time the context manager is created —
    once per training step in a typical loop — and they are slated for removal.

    ## Fix safety
    The fix rewrites `torch.cuda.amp.autocast(args)` to `torch.amp.autocast("cuda", args)` (and the
    `cpu` form to `"cpu"`), which is what the deprecated wrapper calls itself: the same dtype, the
    same `enabled` and `cache_enabled`. Imports and uses through an imported name are reported
    without a fix.
    """

    code = "TP311"
    category = Category.NUMERICS
    severity = Severity.WARNING
    message = "`torch.cuda.amp.autocast` is deprecated: it warns on every use on torch 2.13 and will be removed"
    fix_hint = 'use `torch.amp.autocast("cuda", ...)`'
    triggers = ("amp",)
    fixable = True
    names = dict.fromkeys(DEVICE)

    valid = [
        """
import torch
with torch.amp.autocast("cuda", dtype=torch.bfloat16):
    out = model(x)
with torch.autocast(device_type="cpu"):
    out = model(x)
""",
        """
import torch
def run_in(context: torch.cuda.amp.autocast, job) -> torch.cpu.amp.autocast:
    with context:
        return job()
""",
    ]
    invalid = [
        Invalid("""
import torch
with torch.cuda.amp.autocast(dtype=torch.float16):
    loss = model(x).sum()
with torch.cpu.amp.autocast():
    y = model(x)
""", fixed="""
import torch
with torch.amp.autocast("cuda", dtype=torch.float16):
    loss = model(x).sum()
with torch.amp.autocast("cpu"):
    y = model(x)
""", count=2),
        Invalid("""
from torch.cuda.amp import autocast
with autocast():
    y = model(x)
"""),
    ]

    def describe(self, qn: str) -> str | None:
        return f"`{qn}` is deprecated: it warns on every use on torch 2.13 and will be removed"

    def hint(self, qn: str) -> str | None:
        return f'use `torch.amp.autocast("{DEVICE[qn]}", ...)`'

    def fix_call(self, call: ast.Call, ctx: FileContext, qn: str) -> str | None:
        func = respell(call.func, ctx, "torch.amp.autocast")
        return call_text(ctx, call, func, [f'"{DEVICE[qn]}"']) if func else None
