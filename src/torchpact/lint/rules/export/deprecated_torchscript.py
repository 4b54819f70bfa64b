from __future__ import annotations

from torchpact.findings import Category, Severity
from torchpact.lint.rule import Invalid
from torchpact.lint.rules._api import ApiUse


class DeprecatedTorchscript(ApiUse):
    """`torch.jit.script` / `torch.jit.trace` is used; TorchScript is deprecated on torch 2.13.

    ## What it does
    Flags calls of `torch.jit.script`, `torch.jit.trace` and `torch.jit.trace_module`. Info only:
    existing TorchScript deployments keep working.

    ## Why is this bad?
    On torch 2.13 each call emits `DeprecationWarning: torch.jit.script is deprecated. Please switch
    to torch.compile or torch.export.` TorchScript gets no new features, and the newer exporters
    (`torch.export`, the dynamo ONNX exporter) do not take a scripted module (see TP704).

    ## Fix safety
    No autofix: `torch.export.export(model, args)` is the replacement for deployment and
    `torch.compile(model)` for speed; both need the model's inputs and may surface graph breaks.
    """

    code = "TP755"  # shared with export-check's finding of the same pattern (audit/export.py)
    category = Category.EXPORT
    severity = Severity.INFO
    message = "TorchScript (`torch.jit.script` / `trace`) is deprecated on torch 2.13"
    fix_hint = "use `torch.export.export(model, args)` for deployment or `torch.compile(model)` for speed"
    triggers = ("jit",)
    names = dict.fromkeys(("torch.jit.script", "torch.jit.trace", "torch.jit.trace_module"))

    valid = ["""
import torch
ep = torch.export.export(model, (x,))
fast = torch.compile(model)
@torch.jit.ignore
def helper(x):
    return x
"""]
    invalid = [Invalid("""
import torch
scripted = torch.jit.script(model)
traced = torch.jit.trace(model, example)
""", count=2)]
