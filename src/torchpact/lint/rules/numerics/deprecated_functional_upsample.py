from __future__ import annotations

import ast

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, keyword
from torchpact.lint.rule import Invalid
from torchpact.lint.rules._api import ApiUse, call_text, respell

INTERPOLATE = "torch.nn.functional.interpolate"
# extra keywords that make the old call the same interpolate call
MODE = {
    "torch.nn.functional.upsample": None,
    "torch.nn.functional.upsample_nearest": 'mode="nearest"',
    "torch.nn.functional.upsample_bilinear": 'mode="bilinear", align_corners=True',
}


class DeprecatedFunctionalUpsample(ApiUse):
    """`F.upsample`, `F.upsample_nearest` or `F.upsample_bilinear` is used instead of `F.interpolate`.

    ## What it does
    Flags uses of the three `torch.nn.functional.upsample*` functions.

    ## Why is this bad?
    On torch 2.13 each call warns `nn.functional.upsample is deprecated. Use
    nn.functional.interpolate instead.` (every forward pass). `upsample_bilinear` also hides
    that it uses `align_corners=True`, unlike `interpolate`'s default.

    ## Fix safety
    The fix calls `F.interpolate` with the same arguments, adding `mode="nearest"` for
    `upsample_nearest` and `mode="bilinear", align_corners=True` for `upsample_bilinear` — exactly
    what the deprecated wrappers pass (the proof compares the outputs). Calls already passing
    `mode` / `align_corners` to those two are reported without a fix.
    """

    code = "TP324"
    category = Category.NUMERICS
    severity = Severity.WARNING
    message = "`F.upsample*` is deprecated: it warns on every call on torch 2.13"
    fix_hint = "use `F.interpolate` (for upsample_bilinear: `mode=\"bilinear\", align_corners=True`)"
    triggers = ("upsample",)
    fixable = True
    names = dict.fromkeys(MODE)

    valid = ["""
import torch.nn.functional as F
y = F.interpolate(x, scale_factor=2, mode="nearest")
"""]
    invalid = [
        Invalid("""
import torch.nn.functional as F
y = F.upsample(x, scale_factor=2, mode="bilinear", align_corners=False)
z = F.upsample_bilinear(x, size=(64, 64))
""", fixed="""
import torch.nn.functional as F
y = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
z = F.interpolate(x, size=(64, 64), mode="bilinear", align_corners=True)
""", count=2),
    ]

    def fix_call(self, call: ast.Call, ctx: FileContext, qn: str) -> str | None:
        func = respell(call.func, ctx, INTERPOLATE)
        if func is None:
            return None
        extra = MODE[qn]
        if extra is None:
            return call_text(ctx, call, func)
        if keyword(call, "mode") is not None or keyword(call, "align_corners") is not None:
            return None
        return call_text(ctx, call, func, extra_last=[extra])
