from __future__ import annotations

from torchpact.findings import Category, Severity
from torchpact.lint.rule import Invalid
from torchpact.lint.rules._api import ApiUse

PUBLIC = {
    "torch.utils.data._utils.collate.default_collate": "torch.utils.data.default_collate",
    "torch.utils.data._utils.collate.default_convert": "torch.utils.data.default_convert",
}


class PrivateDefaultCollate(ApiUse):
    """`default_collate` / `default_convert` is imported from the private `torch.utils.data._utils.collate`.

    ## What it does
    Flags uses and imports of `torch.utils.data._utils.collate.default_collate` and
    `default_convert` (TorchFix TOR104 / TOR105, with its autofix).

    ## Why is this bad?
    `_utils` is private: torch may move or change it in any release without a deprecation. The
    same functions are public as `torch.utils.data.default_collate` / `default_convert` since
    torch 1.11 (on torch 2.13 they are the very same objects — the proof checks it).

    ## Fix safety
    The fix imports the same function from its public location, so nothing changes at run time.
    """

    code = "TP511"
    category = Category.DATA
    severity = Severity.INFO
    message = "`default_collate` / `default_convert` is used from a private torch module"
    fix_hint = "use `torch.utils.data.default_collate` / `torch.utils.data.default_convert`"
    triggers = ("_utils",)
    fixable = True
    names = PUBLIC
    references_count = True  # the private path may vanish: a reference fails as a call would

    valid = ["""
from torch.utils.data import default_collate
batch = default_collate(samples)
"""]
    invalid = [
        Invalid("""
from torch.utils.data._utils.collate import default_collate
""", fixed="""
from torch.utils.data import default_collate
"""),
        Invalid("""
import torch
batch = torch.utils.data._utils.collate.default_collate(samples)
""", fixed="""
import torch
batch = torch.utils.data.default_collate(samples)
"""),
    ]
