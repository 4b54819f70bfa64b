from __future__ import annotations

from torchpact.findings import Category, Severity
from torchpact.lint.rules._api import ApiUse


class TorchvisionV2ToTensor(ApiUse):
    """`torchvision.transforms.v2.ToTensor` is used; it is deprecated in the v2 API.

    ## What it does
    Flags uses and imports of `torchvision.transforms.v2.ToTensor` (TorchFix TOR202).

    ## Why is this bad?
    torchvision deprecates `v2.ToTensor` ("will be removed in a future release") because it
    does two things at once — converts to a tensor image *and* rescales to `[0, 1]` only for some
    input types — which is easy to get wrong with the v2 tensor subclasses. Its constructor warns
    (torchvision 0.28, `transforms/v2/_deprecated.py`):
    `UserWarning: The transform ToTensor() is deprecated and will be removed in a future release`.

    ## Fix safety
    No autofix: the replacement is `v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32,
    scale=True)])`, which needs `torch` imported and changes the transform's structure.
    """

    code = "TP512"
    category = Category.DATA
    severity = Severity.WARNING
    message = "`torchvision.transforms.v2.ToTensor` is deprecated and will be removed"
    fix_hint = "use `v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])`"
    triggers = ("ToTensor",)
    needs_torch_import = False
    needs_import = "torchvision"
    proof = ("needs torchvision, which is not a torchpact test dependency (no torchvision build matches "
             "the pinned torch 2.13 CPU wheel)")
    names = {"torchvision.transforms.v2.ToTensor": None}

    valid = ["""
import torch
from torchvision.transforms import v2, ToTensor
tf = v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])
legacy = ToTensor()
"""]
    invalid = ["""
from torchvision.transforms import v2
tf = v2.Compose([v2.RandomResizedCrop(224), v2.ToTensor()])
"""]
