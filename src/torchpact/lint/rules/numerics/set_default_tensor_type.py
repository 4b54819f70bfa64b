from __future__ import annotations

from torchpact.findings import Category, Severity
from torchpact.lint.rules._api import ApiUse


class SetDefaultTensorType(ApiUse):
    """`torch.set_default_tensor_type` is used instead of `set_default_dtype` / `set_default_device`.

    ## What it does
    Flags uses of `torch.set_default_tensor_type`.

    ## Why is this bad?
    On torch 2.13 it warns `torch.set_default_tensor_type() is deprecated as of PyTorch 2.1, please
    use torch.set_default_dtype() and torch.set_default_device() as alternatives.` It couples dtype
    and device in one legacy tensor-type class (`torch.cuda.FloatTensor`), which `torch.compile`
    and the newer device types do not understand.

    ## Fix safety
    No autofix: one call maps to one or two new calls depending on the type passed
    (`torch.cuda.HalfTensor` is `set_default_dtype(torch.float16)` plus
    `set_default_device("cuda")`).
    """

    code = "TP326"
    category = Category.NUMERICS
    severity = Severity.WARNING
    message = "`torch.set_default_tensor_type` is deprecated since torch 2.1 and warns on torch 2.13"
    fix_hint = "use `torch.set_default_dtype(...)` and `torch.set_default_device(...)`"
    triggers = ("set_default_tensor_type",)
    names = {"torch.set_default_tensor_type": None}

    valid = ["""
import torch
torch.set_default_dtype(torch.float64)
torch.set_default_device("cuda")
"""]
    invalid = ["""
import torch
torch.set_default_tensor_type(torch.cuda.FloatTensor)
"""]
