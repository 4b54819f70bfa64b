from __future__ import annotations

from torchpact.findings import Category, Severity
from torchpact.lint.rule import Invalid
from torchpact.lint.rules._api import ApiUse


class DeprecatedClipGradNorm(ApiUse):
    """`torch.nn.utils.clip_grad_norm` is called instead of `clip_grad_norm_`.

    ## What it does
    Flags uses and imports of `torch.nn.utils.clip_grad_norm` (without the underscore).

    ## Why is this bad?
    On torch 2.13 it warns `FutureWarning: torch.nn.utils.clip_grad_norm is now deprecated in
    favor of torch.nn.utils.clip_grad_norm_.` once per call — every training step.

    ## Fix safety
    The old name calls `clip_grad_norm_` with the same arguments; the fix renames it (the proof
    compares the clipped gradients and the returned norm).
    """

    code = "TP415"
    category = Category.TRAINING
    severity = Severity.WARNING
    message = "`clip_grad_norm` is deprecated in favour of `clip_grad_norm_` and warns on torch 2.13"
    fix_hint = "use `torch.nn.utils.clip_grad_norm_`"
    triggers = ("clip_grad_norm",)
    fixable = True
    names = {"torch.nn.utils.clip_grad_norm": "torch.nn.utils.clip_grad_norm_"}

    valid = ["""
import torch
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
"""]
    invalid = [
        Invalid("""
import torch
torch.nn.utils.clip_grad_norm(model.parameters(), max_norm=1.0)
""", fixed="""
import torch
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
"""),
        Invalid("""
from torch.nn.utils import clip_grad_norm
""", fixed="""
from torch.nn.utils import clip_grad_norm_ as clip_grad_norm
"""),
    ]
