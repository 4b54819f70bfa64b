from __future__ import annotations

import ast

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, argument, is_const
from torchpact.lint.rule import Invalid
from torchpact.lint.rules._api import ApiUse, respell


class DeprecatedTorchQr(ApiUse):
    """`torch.qr` is used instead of `torch.linalg.qr`.

    ## What it does
    Flags `torch.qr(...)` (TorchFix TOR101, with its autofix).

    ## Why is this bad?
    On torch 2.13 `torch.qr` warns `torch.qr is deprecated in favor of torch.linalg.qr and will be
    removed in a future PyTorch release`. Its boolean `some` does not say what it does;
    `torch.linalg.qr` takes `mode="reduced" | "complete" | "r"`.

    ## Fix safety
    `torch.qr(A)` becomes `torch.linalg.qr(A)` and `torch.qr(A, some=False)` becomes
    `torch.linalg.qr(A, mode="complete")`: the same Q and R (the proof compares them). Other
    argument forms are reported without a fix.
    """

    code = "TP314"
    category = Category.NUMERICS
    severity = Severity.WARNING
    message = "`torch.qr` is deprecated: it warns on torch 2.13 and will be removed"
    fix_hint = 'use `torch.linalg.qr(A)` (`some=False` is `mode="complete"`)'
    triggers = ("qr",)
    fixable = True
    names = {"torch.qr": None}

    valid = ["""
import torch
q, r = torch.linalg.qr(A)
q, r = torch.linalg.qr(A, mode="complete")
"""]
    invalid = [
        Invalid("""
import torch
q, r = torch.qr(A)
Q, R = torch.qr(A, some=False)
""", fixed="""
import torch
q, r = torch.linalg.qr(A)
Q, R = torch.linalg.qr(A, mode="complete")
""", count=2),
    ]

    def fix_call(self, call: ast.Call, ctx: FileContext, qn: str) -> str | None:
        func = respell(call.func, ctx, "torch.linalg.qr")
        a, some = argument(call, "input", 0), argument(call, "some", 1)
        if func is None or a is None or len(call.args) + len(call.keywords) != 1 + (some is not None):
            return None
        if some is None or is_const(some, True):
            return f"{func}({ctx.locator.source(a)})"
        if is_const(some, False):
            return f'{func}({ctx.locator.source(a)}, mode="complete")'
        return None
