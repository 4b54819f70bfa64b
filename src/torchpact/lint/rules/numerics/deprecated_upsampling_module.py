from __future__ import annotations

import ast

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Invalid
from torchpact.lint.rules._api import ApiUse, call_text, respell

MODE = {
    "torch.nn.UpsamplingNearest2d": 'mode="nearest"',
    "torch.nn.UpsamplingBilinear2d": 'mode="bilinear", align_corners=True',
}


class DeprecatedUpsamplingModule(ApiUse):
    """`nn.UpsamplingNearest2d` / `nn.UpsamplingBilinear2d` is used instead of `nn.Upsample`.

    ## What it does
    Flags uses of the two classes (TorchFix TOR101).

    ## Why is this bad?
    torch's documentation marks both deprecated in favour of `nn.Upsample` / `F.interpolate`; torch
    2.13 does not warn yet. `UpsamplingBilinear2d` silently uses `align_corners=True`, unlike
    `nn.Upsample(mode="bilinear")`, which is a common source of a half-pixel shift when code is
    ported between the two.

    ## Fix safety
    The fix builds `nn.Upsample(<same arguments>, mode="nearest")` or `nn.Upsample(<same
    arguments>, mode="bilinear", align_corners=True)`: the same module output (the proof compares
    them) with no parameters or buffers, so state dicts are unaffected.
    """

    code = "TP325"
    category = Category.NUMERICS
    severity = Severity.INFO
    message = ("`nn.UpsamplingNearest2d` / `nn.UpsamplingBilinear2d` is marked deprecated in torch's documentation "
               "in favour of `nn.Upsample` (torch 2.13 does not warn); `UpsamplingBilinear2d` also uses "
               "`align_corners=True`")
    fix_hint = 'use `nn.Upsample(..., mode="nearest")` / `nn.Upsample(..., mode="bilinear", align_corners=True)`'
    triggers = ("Upsampling",)
    fixable = True
    names = dict.fromkeys(MODE)

    valid = ["""
from torch import nn
up = nn.Upsample(scale_factor=2, mode="nearest")
"""]
    invalid = [
        Invalid("""
from torch import nn
up = nn.UpsamplingBilinear2d(scale_factor=2)
""", fixed="""
from torch import nn
up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
"""),
    ]

    def fix_call(self, call: ast.Call, ctx: FileContext, qn: str) -> str | None:
        func = respell(call.func, ctx, "torch.nn.Upsample")
        return call_text(ctx, call, func, extra_last=[MODE[qn]]) if func else None
