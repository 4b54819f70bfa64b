from __future__ import annotations

import ast

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, argument, is_const
from torchpact.lint.rule import Invalid
from torchpact.lint.rules._api import ApiUse, respell


class DeprecatedTorchCholesky(ApiUse):
    """`torch.cholesky` is used instead of `torch.linalg.cholesky`.

    ## What it does
    Flags `torch.cholesky(...)` (TorchFix TOR101, with its autofix).

    ## Why is this bad?
    On torch 2.13 `torch.cholesky` warns `torch.cholesky is deprecated in favor of
    torch.linalg.cholesky and will be removed in a future PyTorch release`.

    ## Fix safety
    `torch.cholesky(A)` becomes `torch.linalg.cholesky(A)` and `torch.cholesky(A, upper=True)`
    becomes `torch.linalg.cholesky(A).mH`: the same factor (the proof compares them). Other
    argument forms are reported without a fix.
    """

    code = "TP315"
    category = Category.NUMERICS
    severity = Severity.WARNING
    message = "`torch.cholesky` is deprecated: it warns on torch 2.13 and will be removed"
    fix_hint = "use `torch.linalg.cholesky(A)` (`upper=True` is `torch.linalg.cholesky(A).mH`)"
    triggers = ("cholesky",)
    fixable = True
    names = {"torch.cholesky": None}

    valid = ["""
import torch
L = torch.linalg.cholesky(S)
x = torch.cholesky_solve(b, L)
""",
    """
import torch
saved_cholesky = torch.cholesky

def jittered(a, upper=False):
    return torch.linalg.cholesky(a + 1e-6 * torch.eye(a.shape[-1]), upper=upper)

def run_with_jitter(job):
    torch.cholesky = jittered
    try:
        return job()
    finally:
        torch.cholesky = saved_cholesky
""",
    ]
    invalid = [
        Invalid("""
import torch
L = torch.cholesky(S)
U = torch.cholesky(S, upper=True)
""", fixed="""
import torch
L = torch.linalg.cholesky(S)
U = torch.linalg.cholesky(S).mH
""", count=2),
        Invalid("""
import torch
factor = torch.cholesky if legacy else torch.linalg.cholesky
L = factor(cov)
"""),
    ]

    def fix_call(self, call: ast.Call, ctx: FileContext, qn: str) -> str | None:
        func = respell(call.func, ctx, "torch.linalg.cholesky")
        a, upper = argument(call, "input", 0), argument(call, "upper", 1)
        if func is None or a is None or len(call.args) + len(call.keywords) != 1 + (upper is not None):
            return None
        if upper is None or is_const(upper, False):
            return f"{func}({ctx.locator.source(a)})"
        if is_const(upper, True):
            return f"{func}({ctx.locator.source(a)}).mH"
        return None
