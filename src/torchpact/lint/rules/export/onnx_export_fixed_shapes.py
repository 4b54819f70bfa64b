from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, keyword
from torchpact.lint.rule import Hit, Rule
from torchpact.lint.rules.export._util import EXPORT_CALLEES, call_chain, export_call


class OnnxExportFixedShapes(Rule):
    """`torch.onnx.export` without `dynamic_shapes` / `dynamic_axes`: the ONNX inputs get fixed shapes.

    ## What it does
    Flags `torch.onnx.export(...)` calls that pass neither `dynamic_shapes=` nor `dynamic_axes=` (nor
    `**kwargs` that could hold them), with either exporter. Exporting an `ExportedProgram` (a value
    from `torch.export.export`, or a name such as `ep` / `exported_program`) is not flagged: its
    shapes were decided by `torch.export.export`.

    ## Why is this bad?
    On torch 2.13 every dimension of the example inputs becomes a fixed size in the ONNX graph: a
    `Linear` exported with a `(3, 4)` example declares its input as `[3, 4]`, and onnxruntime then
    refuses a batch of 5 with `INVALID_ARGUMENT : Got invalid dimensions for input: input for the
    following indices index: 0 Got: 5 Expected: 3`. With `dynamic_shapes=({0: Dim("batch")},)` (or
    `dynamic_axes={"input": {0: "batch"}}`) the input is declared `["batch", 4]` and any batch size
    runs. A model deployed with one fixed input size is fine, hence only advice.

    ## Fix safety
    No autofix: which dimensions vary is the author's choice. Pass `dynamic_shapes` (the default
    exporter) or `dynamic_axes` (with input names; also accepted by the default exporter).
    """

    code = "TP703"
    category = Category.EXPORT
    severity = Severity.INFO
    requires = (
        "the call resolves to `torch.onnx.export` and passes no dynamic shapes or axes",
    )
    facts = ("onnx-export-fixes-input-shapes",)
    message = ("ONNX export without dynamic_shapes/dynamic_axes: every input dimension is fixed to the "
               "example's size, and onnxruntime rejects any other batch size")
    fix_hint = ("pass `dynamic_shapes=({0: torch.export.Dim('batch')},)` (or `dynamic_axes=`) "
                "for the dimensions that vary")
    nodes = (ast.Call,)
    calls = EXPORT_CALLEES
    triggers = ("onnx",)

    valid = [
        """
import torch
from torch.export import Dim

model = torch.nn.Linear(4, 2).eval()
torch.onnx.export(model, (torch.randn(3, 4),), "m.onnx", dynamic_shapes=({0: Dim("batch")},))
torch.onnx.export(model, (torch.randn(3, 4),), "m2.onnx", input_names=["x"],
                  dynamic_axes={"x": {0: "batch"}}, dynamo=False)
""",
        """
import torch

def to_onnx(model, sample, path, **kwargs):
    torch.onnx.export(model, (sample,), path, **kwargs)   # the caller may pass dynamic shapes

ep = torch.export.export(torch.nn.Linear(4, 2), (torch.randn(3, 4),))
torch.onnx.export(ep, f="ep.onnx")
""",
    ]
    invalid = [
        """
import torch

model = torch.nn.Linear(4, 2).eval()
torch.onnx.export(model, (torch.randn(3, 4),), "model.onnx")
""",
        """
import torch.onnx
from torch import nn

def export(path):
    net = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval()
    torch.onnx.export(net, (torch.randn(1, 8),), path, input_names=["x"], dynamo=False,
                      opset_version=17)
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        ec = export_call(node, ctx)
        if ec is None or not ec.qualname.startswith("torch.onnx.") or ec.opaque_kwargs:
            return
        if keyword(node, "dynamic_shapes") is not None or keyword(node, "dynamic_axes") is not None:
            return
        if ec.model is not None and _is_exported_program(ec.model, ctx):
            return
        yield self.hit(node)


def _is_exported_program(expr: ast.AST, ctx: FileContext) -> bool:
    name = expr.id if isinstance(expr, ast.Name) else expr.attr if isinstance(expr, ast.Attribute) else ""
    if name == "ep" or "export" in name.lower() or "program" in name.lower():
        return True  # `exported_program`, `ep`: named for what it holds
    for value in ctx.values(expr):
        root, _ = call_chain(value)
        if ctx.call_name(root) in ("torch.export.export", "torch.export.load"):
            return True
    return False
