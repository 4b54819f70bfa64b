from __future__ import annotations

from torchpact.findings import Category, Severity
from torchpact.lint.rule import Invalid
from torchpact.lint.rules._api import ApiUse


class DeprecatedTorchGer(ApiUse):
    """`torch.ger` is used instead of `torch.outer`.

    ## What it does
    Flags uses of `torch.ger` (TorchFix TOR101, with its autofix).

    ## Why is this bad?
    torch's documentation says `torch.ger` "is deprecated and will be removed in a future PyTorch
    release. Use torch.outer() instead."; torch 2.13 does not warn yet, so the removal will
    arrive without notice.

    ## Fix safety
    `torch.ger` is an alias of `torch.outer` with the same arguments; the fix renames it (the proof
    compares the results).
    """

    code = "TP328"
    category = Category.NUMERICS
    severity = Severity.INFO
    message = ("`torch.ger` is an alias of `torch.outer` that torch's documentation marks deprecated "
               "(torch 2.13 does not warn)")
    fix_hint = "use `torch.outer`"
    triggers = ("ger",)
    fixable = True
    names = {"torch.ger": "torch.outer"}

    valid = ["""
import torch
m = torch.outer(u, v)
"""]
    invalid = [Invalid("""
import torch
m = torch.ger(u, v)
""", fixed="""
import torch
m = torch.outer(u, v)
""")]
