from __future__ import annotations

import ast

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Invalid
from torchpact.lint.rules._api import ApiUse, respell


class DeprecatedChainMatmul(ApiUse):
    """`torch.chain_matmul` is used instead of `torch.linalg.multi_dot`.

    ## What it does
    Flags `torch.chain_matmul(...)` (TorchFix TOR101, with its autofix).

    ## Why is this bad?
    On torch 2.13 it warns `torch.chain_matmul is deprecated and will be removed in a future
    PyTorch release. Use torch.linalg.multi_dot instead`.

    ## Fix safety
    `torch.chain_matmul(a, b, c)` becomes `torch.linalg.multi_dot([a, b, c])`, which picks the same
    cheapest multiplication order and gives the same product (the proof compares them). A call
    with `out=` or `*matrices` is reported without a fix.
    """

    code = "TP316"
    category = Category.NUMERICS
    severity = Severity.WARNING
    message = "`torch.chain_matmul` is deprecated: it warns on torch 2.13 and will be removed"
    fix_hint = "use `torch.linalg.multi_dot([a, b, c])`"
    triggers = ("chain_matmul",)
    fixable = True
    names = {"torch.chain_matmul": None}

    valid = ["""
import torch
y = torch.linalg.multi_dot([a, b, c])
""",
    """
import torch
import warnings
LEGACY_PRODUCTS = (torch.chain_matmul, torch.qr)
for fn in LEGACY_PRODUCTS:
    warnings.filterwarnings("ignore", message=f"torch.{fn.__name__} is deprecated")
""",
    ]
    invalid = [
        Invalid("""
import torch
y = torch.chain_matmul(a, b, c)
""", fixed="""
import torch
y = torch.linalg.multi_dot([a, b, c])
"""),
        """
import torch
z = torch.chain_matmul(*mats)
""",
        Invalid("""
import torch
from functools import partial
product = partial(torch.chain_matmul, left, right)
"""),
    ]

    def fix_call(self, call: ast.Call, ctx: FileContext, qn: str) -> str | None:
        func = respell(call.func, ctx, "torch.linalg.multi_dot")
        if func is None or call.keywords or any(isinstance(a, ast.Starred) for a in call.args):
            return None
        return f"{func}([{', '.join(ctx.locator.source(a) for a in call.args)}])"
