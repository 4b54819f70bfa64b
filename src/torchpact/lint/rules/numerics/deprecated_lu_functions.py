from __future__ import annotations

from torchpact.findings import Category, Severity
from torchpact.lint.rule import Invalid
from torchpact.lint.rules._api import ApiUse

REPLACEMENT = {
    "torch.lu": "torch.linalg.lu_factor(A) (or lu_factor_ex for the `get_infos=True` form)",
    "torch.lu_solve": "torch.linalg.lu_solve(LU, pivots, B) (note the argument order)",
    "torch.triangular_solve": "torch.linalg.solve_triangular(A, B, upper=...) (note the argument order; "
                              "`upper` has no default)",
}


class DeprecatedLuFunctions(ApiUse):
    """`torch.lu`, `torch.lu_solve` or `torch.triangular_solve` is used instead of its `torch.linalg` form.

    ## What it does
    Flags uses of `torch.lu`, `torch.lu_solve` and `torch.triangular_solve` (TorchFix TOR101).

    ## Why is this bad?
    On torch 2.13 each warns that it `is deprecated in favor of torch.linalg.lu_factor` /
    `torch.linalg.lu_solve` / `torch.linalg.solve_triangular` `and will be removed in a future
    PyTorch release`.

    ## Fix safety
    No autofix: the replacements take their arguments in another order (`torch.lu_solve(B, LU,
    pivots)` is `torch.linalg.lu_solve(LU, pivots, B)`; `torch.triangular_solve(B, A)` is
    `torch.linalg.solve_triangular(A, B, upper=True)` and returns only the solution).
    """

    code = "TP317"
    category = Category.NUMERICS
    severity = Severity.WARNING
    message = "this LU / triangular-solve function is deprecated: it warns on torch 2.13 and will be removed"
    fix_hint = "use its torch.linalg replacement"
    triggers = ("lu", "triangular_solve")
    names = dict.fromkeys(REPLACEMENT)

    valid = ["""
import torch
LU, piv = torch.linalg.lu_factor(A)
x = torch.linalg.lu_solve(LU, piv, b)
y = torch.linalg.solve_triangular(U, b, upper=True)
P, L, U = torch.lu_unpack(LU, piv)
"""]
    invalid = [
        Invalid("""
import torch
LU, piv = torch.lu(A)
x = torch.lu_solve(b, LU, piv)
y, _ = torch.triangular_solve(b, U)
""", count=3),
    ]

    def describe(self, qn: str) -> str | None:
        return f"`{qn}` is deprecated: it warns on torch 2.13 and will be removed"

    def hint(self, qn: str) -> str | None:
        return f"use {REPLACEMENT[qn]}"
