from __future__ import annotations

import ast

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Invalid
from torchpact.lint.rules._api import ApiUse, call_text, respell

NEW = {"torch.cuda.amp.custom_fwd": "torch.amp.custom_fwd", "torch.cuda.amp.custom_bwd": "torch.amp.custom_bwd"}


class DeprecatedCudaAmpCustomFwd(ApiUse):
    """`torch.cuda.amp.custom_fwd` / `custom_bwd` decorate an autograd Function instead of `torch.amp`'s.

    ## What it does
    Flags uses and imports of `torch.cuda.amp.custom_fwd` and `torch.cuda.amp.custom_bwd`.

    ## Why is this bad?
    On torch 2.13 each emits `FutureWarning: torch.cuda.amp.custom_fwd(args...) is deprecated.
    Please use torch.amp.custom_fwd(args..., device_type='cuda') instead.` when the decorator is
    applied; the names are kept only for compatibility.

    ## Fix safety
    `@torch.cuda.amp.custom_fwd` becomes `@torch.amp.custom_fwd(device_type="cuda")` and
    `@torch.cuda.amp.custom_fwd(cast_inputs=...)` becomes
    `@torch.amp.custom_fwd(cast_inputs=..., device_type="cuda")`: what the deprecated wrappers
    call themselves. Imports are reported without a fix.
    """

    code = "TP321"
    category = Category.NUMERICS
    severity = Severity.WARNING
    message = "`torch.cuda.amp.custom_fwd` / `custom_bwd` is deprecated: it warns on torch 2.13"
    fix_hint = 'use `torch.amp.custom_fwd(device_type="cuda")` / `torch.amp.custom_bwd(device_type="cuda")`'
    triggers = ("custom_",)
    fixable = True
    names = dict.fromkeys(NEW)

    valid = ["""
import torch
class F(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
    def forward(ctx, x):
        return x
"""]
    invalid = [
        Invalid("""
import torch
class Mul(torch.autograd.Function):
    @staticmethod
    @torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, x):
        return x * 2

    @staticmethod
    @torch.cuda.amp.custom_bwd
    def backward(ctx, g):
        return g * 2
""", fixed="""
import torch
class Mul(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(cast_inputs=torch.float32, device_type="cuda")
    def forward(ctx, x):
        return x * 2

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, g):
        return g * 2
""", count=2),
        """
from torch.cuda.amp import custom_fwd
""",
    ]

    def describe(self, qn: str) -> str | None:
        return f"`{qn}` is deprecated: it warns on torch 2.13"

    def fix_call(self, call: ast.Call, ctx: FileContext, qn: str) -> str | None:
        func = respell(call.func, ctx, NEW[qn])
        return call_text(ctx, call, func, extra_last=['device_type="cuda"']) if func else None

    def renamed(self, node: ast.Attribute, ctx: FileContext, qn: str) -> str | None:
        func = respell(node, ctx, NEW[qn])
        return f'{func}(device_type="cuda")' if func else None
