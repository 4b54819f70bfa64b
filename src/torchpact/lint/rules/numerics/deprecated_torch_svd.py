from __future__ import annotations

from torchpact.findings import Category, Severity
from torchpact.lint.rules._api import ApiUse


class DeprecatedTorchSvd(ApiUse):
    """`torch.svd` is used; it is deprecated and returns `V`, where `torch.linalg.svd` returns `Vh`.

    ## What it does
    Flags calls of the function `torch.svd` (TorchFix TOR101); `x.svd()` is not flagged.

    ## Why is this bad?
    torch's documentation marks `torch.svd` deprecated in favour of `torch.linalg.svd`; torch 2.13
    does not warn (the proof checks it), so this is advice, not a removal notice. The two are
    not interchangeable: on torch 2.13 `torch.svd(A)` returns `V` and the reduced factors by
    default (`some=True`), while `torch.linalg.svd(A)` returns `Vh = V.mH` and the full factors
    (`full_matrices=True`) — swapping the name alone silently transposes the result.

    ## Fix safety
    No autofix: the replacement is `U, S, Vh = torch.linalg.svd(A, full_matrices=False)` followed
    by `V = Vh.mH`, which touches the code that uses `V`.
    """

    code = "TP330"
    category = Category.NUMERICS
    severity = Severity.INFO
    message = ("`torch.svd` is marked deprecated in torch's documentation (torch 2.13 does not warn), and its "
               "replacement `torch.linalg.svd` returns `Vh` (not `V`) and full factors by default")
    fix_hint = "use `U, S, Vh = torch.linalg.svd(A, full_matrices=False)` and `V = Vh.mH`"
    triggers = ("svd",)
    names = {"torch.svd": None}

    valid = ["""
import torch
U, S, Vh = torch.linalg.svd(A, full_matrices=False)
s = torch.linalg.svdvals(A)
"""]
    invalid = ["""
import torch
U, S, V = torch.svd(A)
"""]
