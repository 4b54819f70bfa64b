from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules.export._util import EXPORT_CALLEES, export_call, exports_torchscript


class OnnxExportOfScriptModule(Rule):
    """A TorchScript module (`torch.jit.script` / `trace` / `load` result) is exported with the default ONNX exporter.

    ## What it does
    Flags `torch.onnx.export(m, ...)` (default exporter, i.e. without `dynamo=False`) and
    `torch.export.export(m, ...)` when `m` is the result of `torch.jit.script`, `torch.jit.trace`,
    `torch.jit.load` or `torch.jit.freeze` in the same file.

    ## Why is this bad?
    Since torch 2.9 `torch.onnx.export` runs `torch.export`, which does not take TorchScript. On
    torch 2.13 the call raises `TorchExportError: Failed to export the model with torch.export.`
    caused by `ValueError: Exporting a ScriptModule is not supported. Maybe try converting your
    ScriptModule to an ExportedProgram using TS2EPConverter(mod, args, kwargs).convert() instead.`
    (`torch.export.export` raises that `ValueError` directly; a scripted function gives
    `Expected mod to be an instance of torch.nn.Module`). Code written for the old exporter, where
    scripting first was the way to keep control flow, now fails.

    ## Fix safety
    No autofix: export the original `nn.Module` (using `torch.cond` for data-dependent branches),
    or keep the TorchScript path explicitly with `torch.onnx.export(..., dynamo=False)`.
    """

    code = "TP704"
    category = Category.EXPORT
    severity = Severity.ERROR
    requires = ("the exporter is resolved (`torch.export.export`, or `torch.onnx.export` on its dynamo path)",
                "every value of the exported model is made by a resolved TorchScript maker (`torch.jit.script` / "
                "`trace` / `load`)")
    facts = ("onnx-export-of-script-module-works",)
    message = ("a TorchScript module is exported with torch.export (the default ONNX exporter): torch "
               "raises 'Exporting a ScriptModule is not supported'")
    fix_hint = "export the eager nn.Module instead, or pass `dynamo=False` to use the TorchScript-based ONNX exporter"
    nodes = (ast.Call,)
    calls = EXPORT_CALLEES
    triggers = ("jit.",)

    valid = [
        """
import torch

model = torch.nn.Linear(4, 2).eval()
scripted = torch.jit.script(model)
torch.onnx.export(model, (torch.randn(1, 4),), "m.onnx")                      # the eager module
torch.onnx.export(scripted, (torch.randn(1, 4),), "s.onnx", dynamo=False)   # TorchScript exporter
""",
        """
import torch

def export(model, use_dynamo):
    m = torch.jit.script(model)
    torch.onnx.export(m, (torch.randn(1, 4),), "m.onnx", dynamo=use_dynamo)   # decided at run time
    torch.onnx.export(model, (torch.randn(1, 4),), "e.onnx")
""",
    ]
    invalid = [
        """
import torch

model = torch.nn.Linear(4, 2).eval()
scripted = torch.jit.script(model)
torch.onnx.export(scripted, (torch.randn(1, 4),), "model.onnx")
""",
        Invalid("""
import torch
from torch import jit

def export(path, example):
    m = jit.load("model.pt")
    torch.export.export(m, (example,))
    torch.onnx.export(jit.trace(torch.nn.ReLU(), example), (example,), path, dynamo=True)
""", count=2),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        ec = export_call(node, ctx)
        maker = None if ec is None else exports_torchscript(ec, ctx)
        if ec is None or maker is None:
            return
        message = (f"{ec.label} of a TorchScript module (from `{maker}`): torch.export does not take "
                   "TorchScript and raises 'Exporting a ScriptModule is not supported'")
        yield self.hit(node, message=message, subject=ctx.segment(ec.model) if isinstance(ec.model, ast.Name) else None,
                       evidence=Evidence.MUST)
