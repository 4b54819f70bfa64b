from __future__ import annotations

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Invalid
from torchpact.lint.rules._api import ApiUse

REPLACEMENT = {
    "torch.solve": "torch.linalg.solve(A, B) (note the swapped arguments; it returns only the solution)",
    "torch.symeig": "torch.linalg.eigh(A) (reads the lower triangle by default; pass UPLO='U' for the old default)",
    "torch.matrix_rank": "torch.linalg.matrix_rank(A) (`symmetric=` became `hermitian=`)",
    "torch.lstsq": "torch.linalg.lstsq(A, B).solution (note the swapped arguments)",
    "torch.eig": "torch.linalg.eig(A) (returns complex eigenvalues and eigenvectors)",
}


class RemovedLinalgFunction(ApiUse):
    """A linear-algebra function removed from torch is used: the call raises on torch 2.13.

    ## What it does
    Flags uses and imports of `torch.solve`, `torch.symeig`, `torch.matrix_rank`, `torch.lstsq` and
    `torch.eig` (TorchFix TOR001 / TOR004).

    ## Why is this bad?
    They were deprecated in torch 1.9 and removed since: on torch 2.13 the name still exists, but
    calling it raises `RuntimeError: This function was deprecated since version 1.9 and is now
    removed`. The code path fails the first time it runs, often deep into a job.

    ## Fix safety
    No autofix: the `torch.linalg` replacements take their arguments in another order
    (`torch.linalg.solve(A, B)` for `torch.solve(B, A)`), return other things (no LU factor, complex
    eigenvalues from `linalg.eig`) and default to the other triangle (`linalg.eigh`).
    """

    code = "TP310"
    category = Category.NUMERICS
    severity = Severity.ERROR
    message = "this function was removed from torch: calling it raises RuntimeError on torch 2.13"
    fix_hint = "use its torch.linalg replacement"
    triggers = ("solve", "symeig", "matrix_rank", "lstsq", "eig")
    names = dict.fromkeys(REPLACEMENT)
    requires = ("the name resolves to one of these torch functions through the file's imports",
                "it is called there (`may` for a name bound to it that the file calls, or an import never used)")

    valid = [
        """
import torch
x = torch.linalg.solve(A, b)
w, v = torch.linalg.eigh(S)
r = torch.linalg.matrix_rank(A)
""",
        """
import numpy as np
import torch
x = np.linalg.solve(A, b)
w = scipy.linalg.eig(A)
""",
    ]
    invalid = [
        Invalid("""
import torch
x, lu = torch.solve(b, A)
""", evidence=Evidence.MUST),
        Invalid("""
import torch
from torch import symeig, lstsq
def spectrum(S):
    return torch.eig(S), symeig(S), lstsq(S, S)
""", count=3, evidence=Evidence.MUST),
        Invalid("""
import torch
def fit(A, b, legacy):
    solve = torch.solve if legacy else torch.linalg.solve
    return solve(b, A)
""", severity=Severity.WARNING, evidence=Evidence.MAY),  # bound to a name the file calls: on some paths
    ]

    def evidence(self, ctx: FileContext, qn: str, called: bool) -> Evidence | None:
        return Evidence.MUST if called else None

    def describe(self, qn: str) -> str | None:
        return f"`{qn}` was removed from torch: calling it raises RuntimeError on torch 2.13"

    def hint(self, qn: str) -> str | None:
        return f"use {REPLACEMENT[qn]}"
