from __future__ import annotations

import ast

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Invalid
from torchpact.lint.rules._api import ApiUse, call_text, respell


class DeprecatedCudaAmpGradScaler(ApiUse):
    """`torch.cuda.amp.GradScaler` is used instead of `torch.amp.GradScaler("cuda")`.

    ## What it does
    Flags uses and imports of `torch.cuda.amp.GradScaler` (which TorchFix does not check).

    ## Why is this bad?
    On torch 2.13 constructing it emits `FutureWarning: torch.cuda.amp.GradScaler(args...) is
    deprecated. Please use torch.amp.GradScaler('cuda', args...) instead.`; the class is kept only
    for compatibility and is slated for removal.

    ## Fix safety
    The fix rewrites `torch.cuda.amp.GradScaler(args)` to `torch.amp.GradScaler("cuda", args)`,
    which the deprecated class is a thin subclass of: the same scale, growth and backoff
    arguments, the same `state_dict`. Imports are reported without a fix.
    """

    code = "TP312"
    category = Category.NUMERICS
    severity = Severity.WARNING
    message = "`torch.cuda.amp.GradScaler` is deprecated: it warns on torch 2.13 and will be removed"
    fix_hint = 'use `torch.amp.GradScaler("cuda", ...)`'
    triggers = ("GradScaler",)
    fixable = True
    names = {"torch.cuda.amp.GradScaler": None}

    valid = [
        """
import torch
scaler = torch.amp.GradScaler("cuda", init_scale=2.0**14)
cpu_scaler = torch.amp.GradScaler("cpu")
""",
        """
import torch
scaler = torch.amp.GradScaler("cuda") if _TORCH_GREATER_EQUAL_2_4 else torch.cuda.amp.GradScaler()
try:
    from torch.amp import GradScaler
except ImportError:
    from torch.cuda.amp import GradScaler
""",
        """
import torch
def is_legacy_scaler(obj) -> bool:
    return isinstance(obj, torch.cuda.amp.GradScaler) and not isinstance(obj, torch.amp.GradScaler)
""",
        """
from typing import TYPE_CHECKING
import torch
if TYPE_CHECKING:
    from torch.cuda.amp import GradScaler
else:
    GradScaler = torch.amp.GradScaler

def make_scaler() -> "GradScaler":
    return GradScaler("cuda")
""",
    ]
    invalid = [
        Invalid("""
import torch
scaler = torch.cuda.amp.GradScaler(enabled=use_amp)
""", fixed="""
import torch
scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
"""),
        """
from torch.cuda import amp
scaler = amp.GradScaler()
""",
        """
from torch.cuda.amp import GradScaler
scaler = GradScaler()
""",
        Invalid("""
import torch
if is_torch_npu_available():
    scaler = torch.npu.amp.GradScaler()
elif device_type == "cuda":
    scaler = torch.cuda.amp.GradScaler()
""", fixed="""
import torch
if is_torch_npu_available():
    scaler = torch.npu.amp.GradScaler()
elif device_type == "cuda":
    scaler = torch.amp.GradScaler("cuda")
"""),
        """
import torch
class CountingScaler(torch.cuda.amp.GradScaler):
    def update(self, new_scale=None):
        self.updates = getattr(self, "updates", 0) + 1
        super().update(new_scale)
""",
        """
from typing import TYPE_CHECKING
import torch
if TYPE_CHECKING:
    from torch.amp import GradScaler
else:
    from torch.cuda.amp import GradScaler

def make_scaler():
    return GradScaler()
""",
    ]

    def fix_call(self, call: ast.Call, ctx: FileContext, qn: str) -> str | None:
        func = respell(call.func, ctx, "torch.amp.GradScaler")
        return call_text(ctx, call, func, ['"cuda"']) if func else None
