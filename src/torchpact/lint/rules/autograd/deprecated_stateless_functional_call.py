from __future__ import annotations

from torchpact.findings import Category, Severity
from torchpact.lint.rule import Invalid
from torchpact.lint.rules._api import ApiUse


class DeprecatedStatelessFunctionalCall(ApiUse):
    """`torch.nn.utils.stateless.functional_call` is used instead of `torch.func.functional_call`.

    ## What it does
    Flags uses and imports of `torch.nn.utils.stateless.functional_call`.

    ## Why is this bad?
    On torch 2.13 it warns `FutureWarning: torch.nn.utils.stateless.functional_call is deprecated
    as of PyTorch 2.0 and will be removed in a future version of PyTorch. Please use
    torch.func.functional_call instead which is a drop-in replacement.`

    ## Fix safety
    torch's own message calls `torch.func.functional_call` a drop-in replacement; the fix renames
    the call or the import (the proof compares the outputs).
    """

    code = "TP213"
    category = Category.AUTOGRAD
    severity = Severity.WARNING
    message = "`torch.nn.utils.stateless.functional_call` is deprecated since torch 2.0 and warns on torch 2.13"
    fix_hint = "use `torch.func.functional_call` (a drop-in replacement)"
    triggers = ("stateless",)
    fixable = True
    names = {"torch.nn.utils.stateless.functional_call": "torch.func.functional_call"}

    valid = ["""
import torch
out = torch.func.functional_call(model, params, (x,))
"""]
    invalid = [
        Invalid("""
import torch
out = torch.nn.utils.stateless.functional_call(model, params, (x,))
""", fixed="""
import torch
out = torch.func.functional_call(model, params, (x,))
"""),
        Invalid("""
from torch.nn.utils.stateless import functional_call
""", fixed="""
from torch.func import functional_call
"""),
    ]
