from __future__ import annotations

from torchpact.findings import Category, Severity
from torchpact.lint.rules._api import ApiUse


class DeprecatedSdpKernel(ApiUse):
    """`torch.backends.cuda.sdp_kernel` is used instead of `torch.nn.attention.sdpa_kernel`.

    ## What it does
    Flags uses of `torch.backends.cuda.sdp_kernel` (TorchFix TOR101).

    ## Why is this bad?
    On torch 2.13 entering it warns `FutureWarning: torch.backends.cuda.sdp_kernel() is
    deprecated. In the future, this context manager will be removed. Please see
    torch.nn.attention.sdpa_kernel() for the new context manager, with updated signature.`

    ## Fix safety
    No autofix: the new context manager takes a list of `SDPBackend` values instead of four
    booleans (`enable_flash=True, enable_math=False, ...` becomes
    `sdpa_kernel([SDPBackend.FLASH_ATTENTION])`).
    """

    code = "TP921"
    category = Category.PERFORMANCE
    severity = Severity.WARNING
    message = "`torch.backends.cuda.sdp_kernel` is deprecated and warns on torch 2.13"
    fix_hint = "use `torch.nn.attention.sdpa_kernel([SDPBackend.FLASH_ATTENTION, ...])`"
    triggers = ("sdp_kernel",)
    names = {"torch.backends.cuda.sdp_kernel": None}

    valid = ["""
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
    out = attn(q, k, v)
"""]
    invalid = ["""
import torch
with torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False, enable_mem_efficient=False):
    out = attn(q, k, v)
"""]
