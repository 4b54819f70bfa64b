from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, is_const, keyword
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules.export._util import EXPORT_CALLEES, call_chain, export_call, exports_torchscript


class OnnxExportFixedShapes(Rule):
    """`torch.onnx.export` without `dynamic_shapes` / `dynamic_axes`: the ONNX inputs get fixed shapes.

    ## What it does
    Flags `torch.onnx.export(...)` calls that pass neither `dynamic_shapes=` nor `dynamic_axes=` (nor
    `**kwargs` that could hold them), with either exporter. Exporting an `ExportedProgram` (a value
    from `torch.export.export`, or a name such as `ep` / `exported_program`) is not flagged: its
    shapes were decided by `torch.export.export`.

    The condition it needs: the example inputs have a leading batch dimension that varies between
    calls, and the call exports something. So it is not flagged when the exported callable adds the
    batch dimension itself — a function traced with `torch.jit.trace`, or the `forward` of a module
    class of this file, that makes a leading dimension of 1 from every input it takes
    (`x.unsqueeze(0)`, `torch.unsqueeze(x, 0)`, `x[None]`, `x.view(1, *x.shape)`, `x.reshape(1, -1)`,
    directly or over each element of `*inputs`): its inputs are one sample, every dimension is a
    feature or context size, and the ONNX graph declares them as such (`[4]` for one 4-feature
    observation) with no batch size to reject. Nor when `torch.export` raises on the model before
    anything is written (a TorchScript value handed to the default exporter: TP704 reports that).

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
""",        """
import torch

policy = torch.nn.Linear(6, 3).eval()
def act(*obs):
    obs = [o.view(1, *o.shape) for o in obs]
    return policy(obs[0]).argmax(-1)

traced = torch.jit.trace(act, (torch.rand(6),), check_trace=False)
torch.onnx.export(traced, (torch.rand(6),), "policy.onnx", dynamo=False, input_names=["obs"])
""",
        """
import torch
from torch import nn

class SingleStep(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(8, 16)

    def forward(self, x, h):
        return self.cell(x[None], h.unsqueeze(0))

torch.onnx.export(model=SingleStep().eval(), args=(torch.rand(8), torch.rand(16)), f="step.onnx",
                  dynamo=False)
""",
        """
import torch

def score(window, mask):
    window = torch.unsqueeze(window, 0)
    if mask is not None:
        mask = mask.reshape(1, -1)
    return (window * mask[..., None]).sum(-1)

example = (torch.rand(32, 4), torch.ones(32))
torch.onnx.export(torch.jit.trace(score, example), example, "score.onnx", dynamo=False)
""",
        """
import torch

net = torch.nn.Linear(4, 2).eval()
for name in ("a.onnx", "b.onnx"):
    torch.onnx.export(torch.jit.script(net), (torch.randn(3, 4),), name)
    torch.onnx.export(torch.jit.load("net.pt"), (torch.randn(3, 4),), name, dynamo=True)
""",
        """
import torch
from torch import nn

class Framewise(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(40, 10)

    def forward(self, frame):
        return self.proj(frame.unsqueeze(0)).squeeze(0)

def export(path):
    torch.onnx.export(Framewise().eval(), (torch.rand(40),), path)
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
""",        Invalid("""
import torch
from torch import nn

policy = torch.nn.Linear(6, 3).eval()
def act(*obs):
    return policy(obs[0]).argmax(-1)

class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(8, 16)

    def forward(self, x, h):
        return self.cell(x[None], h)

traced = torch.jit.trace(act, (torch.rand(5, 6),), check_trace=False)
torch.onnx.export(traced, (torch.rand(5, 6),), "policy.onnx", dynamo=False)
torch.onnx.export(Pair().eval(), (torch.rand(8), torch.rand(1, 16)), "pair.onnx", dynamo=False)
torch.onnx.export(torch.jit.load("net.pt"), (torch.randn(3, 4),), "n.onnx", dynamo=False)
""", count=3),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        ec = export_call(node, ctx)
        if ec is None or not ec.qualname.startswith("torch.onnx.") or ec.opaque_kwargs:
            return
        if keyword(node, "dynamic_shapes") is not None or keyword(node, "dynamic_axes") is not None:
            return
        if ec.model is not None and _is_exported_program(ec.model, ctx):
            return
        if exports_torchscript(ec, ctx) is not None:
            return  # torch.export raises on it before any shape is fixed (TP704)
        if ec.model is not None and _adds_batch_dimension(ec.model, ctx):
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


def _adds_batch_dimension(model: ast.expr, ctx: FileContext) -> bool:
    """Whether every value of ``model`` is a function (traced) or a module class of this file whose body
    makes a leading dimension of 1 from each input it takes (see the docs)."""
    values = ctx.values(model)
    return bool(values) and all(_callable_adds_batch(v, ctx) for v in values)


def _callable_adds_batch(value: ast.AST, ctx: FileContext) -> bool:
    root, _ = call_chain(value)
    if not isinstance(root, ast.Call):
        return False
    name = ctx.call_name(root)
    if name in ("torch.jit.trace", "torch.jit._trace.trace") and root.args and isinstance(root.args[0], ast.Name):
        fns = ctx.functions.get(root.args[0].id, [])
        return len(fns) == 1 and _batches_every_input(fns[0], ctx)
    cls = ctx.local_module_class(root)
    forward = ctx.method(cls, "forward") if cls is not None else None
    return forward is not None and _batches_every_input(forward, ctx)


def _batches_every_input(fn: ast.FunctionDef | ast.AsyncFunctionDef, ctx: FileContext) -> bool:
    args = fn.args
    inputs = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs] if a.arg not in ("self", "cls")}
    if args.vararg is not None:
        inputs.add(args.vararg.arg)
    if not inputs:
        return False
    batched: set[str] = set()
    for node in ctx.walk_scope(fn.body):
        if isinstance(node, ast.comprehension) and isinstance(node.iter, ast.Name) and node.iter.id in inputs \
                and isinstance(node.target, ast.Name):
            comp = ctx.parent(node)
            element = getattr(comp, "elt", None)
            if element is not None and _leading_one(element) == node.target.id:
                batched.add(node.iter.id)  # ``[v.view(1, *v.shape) for v in xs]``
        found = _leading_one(node)
        if found in inputs:
            batched.add(found)
    return batched == inputs


def _leading_one(node: ast.AST) -> str | None:
    """The name ``node`` gives a new leading dimension of 1: ``x.unsqueeze(0)``, ``torch.unsqueeze(x, 0)``,
    ``x[None]`` / ``x[None, ...]``, ``x.view(1, ...)`` / ``x.reshape(1, ...)``."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        index = node.slice.elts[0] if isinstance(node.slice, ast.Tuple) and node.slice.elts else node.slice
        return node.value.id if isinstance(index, ast.Constant) and index.value is None else None
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    func, args = node.func, node.args
    if func.attr == "unsqueeze" and isinstance(func.value, ast.Name) and len(args) == 1 and is_const(args[0], 0):
        return func.value.id
    if func.attr == "unsqueeze" and len(args) == 2 and isinstance(args[0], ast.Name) and is_const(args[1], 0):
        return args[0].id  # ``torch.unsqueeze(x, 0)``
    if func.attr in ("view", "reshape") and isinstance(func.value, ast.Name) and args and is_const(args[0], 1) \
            and len(args) > 1:
        return func.value.id
    return None
