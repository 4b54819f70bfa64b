from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Hit, Rule
from torchpact.lint.rules.export._util import EXPORT_CALLEES, TRACE, export_call

# Calls whose result is a tensor computed from the *values* of their input (or a number from them).
_VALUE_METHODS = {
    "any", "all", "sum", "max", "min", "mean", "prod", "norm", "amax", "amin", "item",
    "count_nonzero", "std", "var", "median", "argmax", "argmin", "isnan", "isinf", "isfinite",
    "equal", "allclose", "is_nonzero", "nansum", "logsumexp",
}
# Attributes and calls that read a tensor's metadata (shape, dtype, mode), not its values.
_META_ATTRS = {"shape", "ndim", "dtype", "device", "is_cuda", "requires_grad", "layout", "is_sparse",
               "training", "is_quantized", "is_meta", "names"}
_META_METHODS = {"size", "dim", "numel", "nelement", "get_device", "is_contiguous", "is_floating_point",
                 "is_complex", "element_size", "stride", "data_ptr", "type", "ndimension"}
_META_BUILTINS = {"len", "isinstance", "type", "hasattr", "getattr", "id", "callable", "issubclass"}
# A test mentioning one of these is the author steering tracing / compiling / training on purpose.
_GUARD_WORDS = {"is_tracing", "is_scripting", "is_compiling", "is_exporting", "is_dynamo_compiling",
                "training", "is_torchdynamo_compiling", "_is_tracing"}
_CONVERSIONS = {"item", "tolist", "numpy"}


class DataDependentForwardExported(Rule):
    """A model whose `forward` branches on tensor values (or turns them into Python numbers) is exported.

    ## What it does
    Flags `torch.jit.trace`, `torch.export.export` and `torch.onnx.export` of a model whose class is
    defined in the same file, when its `forward` (or the `forward` of a submodule class of the file, or
    a `self.` helper it calls) has Python control flow on tensor *values* derived from the inputs —
    `if x.sum() > 0:`, `while (x > 0).any():`, `if torch.isnan(x).any():` — or, for tracing, turns
    such a value into a Python number (`.item()`, `.tolist()`, `.numpy()`, `int(x.max())`). The
    finding sits on the export call and names the forward's line. Control flow on metadata and flags
    (`if self.training`, `if mask is None`, `if x.dim() == 3`, `x.shape[0]`) is not flagged, nor is
    code under `torch.jit.is_tracing()` / `torch.compiler.is_compiling()` guards.

    ## Why is this bad?
    On torch 2.13, `torch.jit.trace` runs `forward` once on the example and records only the tensor
    operations: the Python `if` is evaluated once and its branch is baked in, a number from `.item()`
    becomes a constant. torch only emits `TracerWarning: Converting a tensor to a Python boolean might
    cause the trace to be incorrect ... the trace might not generalize to other inputs!` and the traced
    model then silently computes the wrong result for inputs that would take the other branch (the
    same holds for `torch.onnx.export(..., dynamo=False)`, which traces). `torch.export.export` and
    the default `torch.onnx.export` (which runs torch.export) refuse the branch instead:
    `GuardOnDataDependentSymNode: Could not guard on data-dependent expression Eq(u0, 1)` (the ONNX
    exporter wraps it in `TorchExportError: Failed to export the model with torch.export.`).
    (torch.export does handle a number from `.item()` used in arithmetic, so conversions alone are
    only flagged for tracing.)

    ## Fix safety
    No autofix. Express the branch with tensor ops (`torch.where`, masking, `torch.clamp`), use
    `torch.cond` for torch.export / ONNX, or `torch.jit.script` the branching part.
    """

    code = "TP701"
    category = Category.EXPORT
    severity = Severity.WARNING
    requires = (
        "the exported model's class is in this file and its `forward` branches on tensor values",
    )
    facts = ("jit-trace-records-one-branch", "export-refuses-data-dependent-branch")
    message = ("the exported model's forward branches on tensor values: tracing bakes in the example's "
               "branch, torch.export raises on it")
    fix_hint = ("express the branch with tensor ops (torch.where / masking) or torch.cond, "
                "not a Python `if` on tensor values")
    nodes = (ast.Call,)
    calls = EXPORT_CALLEES
    triggers = ("jit.trace", "export", "trace(", "trace_module")

    valid = [
        """
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, mask=None):
        if self.training:
            x = self.drop(x)
        if mask is not None:
            x = x * mask
        if x.dim() == 3 and x.shape[0] > 1:
            x = x.flatten(0, 1)
        n = int(x.size(0))
        return torch.where(x.sum(-1, keepdim=True) > 0, self.fc(x), -x)[:n]

model = Net().eval()
traced = torch.jit.trace(model, torch.randn(2, 4))
""",
        """
import torch
from torch import nn

class Scale(nn.Module):
    def forward(self, x):
        s = x.abs().max().item()   # torch.export keeps this as a symbolic number
        if not torch.jit.is_tracing() and torch.isnan(x).any():
            raise ValueError("nan input")
        return x / s

ep = torch.export.export(Scale(), (torch.randn(3),))
""",
        """
import torch
from mylib import Model   # not defined here: its forward cannot be read

model = Model()
model.eval()
torch.onnx.export(model, (torch.randn(1, 3),), "m.onnx")
""",
    ]
    invalid = [
        """
import torch
import torch.nn as nn

class Gate(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1

model = Gate().eval()
traced = torch.jit.trace(model, torch.ones(3))
""",
        """
import torch
from torch.export import export

class Halve(torch.nn.Module):
    def forward(self, x):
        while (x > 1).any():
            x = x / 2
        return x

def save(path):
    ep = export(Halve(), (torch.rand(4),))
    torch.export.save(ep, path)
""",
        """
import torch
from torch import nn

class Block(nn.Module):
    def forward(self, h, mask):
        if mask.any():
            h = h.masked_fill(mask, 0.0)
        return h

class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(2)])

    def forward(self, h, mask):
        for b in self.blocks:
            h = b(h, mask)
        return h

enc = Encoder()
enc.eval()
torch.onnx.export(enc, (torch.randn(2, 4), torch.zeros(2, 4, dtype=torch.bool)), "enc.onnx",
                  dynamic_shapes=None)
""",
        """
import torch

class Crop(torch.nn.Module):
    def forward(self, x, lengths):
        n = int(lengths.max())
        return x[:, :n]

crop = Crop().eval()
ts = torch.jit.trace(crop, (torch.randn(2, 8), torch.tensor([3, 5])))
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        ec = export_call(node, ctx)
        if ec is None or ec.model is None:
            return
        cls = ctx.local_module_class(ec.model)
        if cls is None:
            return
        found = _find(cls, ctx, conversions=ec.kind == TRACE)
        if found is None:
            return
        bad, what, owner = found
        line = getattr(bad, "lineno", None)
        snippet = ctx.segment(bad).split("\n", 1)[0].strip()
        if len(snippet) > 60:
            snippet = snippet[:57] + "..."
        where = f"`{cls.name}.forward`" if owner is cls else f"`{owner.name}` (a submodule of `{cls.name}`)"
        if ec.kind == TRACE:
            consequence = ("the trace evaluates it once on the example input and silently reuses that "
                           "branch/number for every input (torch only emits a TracerWarning)")
        else:
            consequence = ("torch.export raises GuardOnDataDependentSymNode ('Could not guard on "
                           "data-dependent expression') on it")
        message = f"{ec.label} of a model whose {where} {what} at line {line} (`{snippet}`): {consequence}"
        yield self.hit(node, message=message, subject=cls.name)


def _find(root: ast.ClassDef, ctx: FileContext, conversions: bool) -> tuple[ast.AST, str, ast.ClassDef] | None:
    """The first data-dependent branch (or conversion) in the forward of ``root`` or its submodules."""
    seen: set[str] = set()
    frontier = [root]
    for _ in range(4):
        nxt: list[ast.ClassDef] = []
        for cls in frontier:
            if cls.name in seen:
                continue
            seen.add(cls.name)
            forward = ctx.method(cls, "forward")
            if forward is not None:
                found = _scan_function(forward, cls, ctx, conversions, depth=2)
                if found is not None:
                    return found[0], found[1], cls
            nxt.extend(_submodule_classes(cls, ctx))
        frontier = nxt
        if not frontier:
            break
    return None


def _submodule_classes(cls: ast.ClassDef, ctx: FileContext) -> list[ast.ClassDef]:
    out = []
    for node in ast.walk(cls):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ctx.module_classes:
            sub = ctx.module_classes[node.func.id]
            if sub is not cls:
                out.append(sub)
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in ctx.module_classes and base.id != cls.name:
            out.append(ctx.module_classes[base.id])
    return out


def _input_params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Parameters that can carry tensors: not `self`, not ones defaulting to a bool/number/string."""
    args = fn.args
    positional = [*args.posonlyargs, *args.args]
    # the defaults belong to the last positional parameters; kw_defaults holds one entry (None: no
    # default) per keyword-only parameter
    with_default = [a.arg for a in positional][len(positional) - len(args.defaults):]
    defaults: dict[str, ast.expr] = dict(zip(with_default, args.defaults, strict=True))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None})
    out = set()
    for i, a in enumerate([*positional, *args.kwonlyargs]):
        if i == 0 and a.arg in ("self", "cls"):
            continue
        d = defaults.get(a.arg)
        if isinstance(d, ast.Constant) and d.value is not None:
            continue
        ann = ast.unparse(a.annotation) if a.annotation is not None else ""
        if ann in ("bool", "int", "float", "str"):
            continue
        out.add(a.arg)
    if args.vararg:
        out.add(args.vararg.arg)
    return out


def _value_names(expr: ast.AST) -> Iterator[ast.Name]:
    """Names whose *values* ``expr`` reads (metadata reads such as `x.shape` / `len(x)` pruned)."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Attribute) and node.attr in _META_ATTRS:
            continue
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in _META_METHODS:
                continue
            if isinstance(f, ast.Name) and f.id in _META_BUILTINS:
                continue
        if isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, ast.Name):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _taint(fn: ast.FunctionDef | ast.AsyncFunctionDef, start: set[str]) -> set[str]:
    tainted = set(start)
    body = list(FileContext.walk_scope(fn.body))
    for _ in range(4):
        before = len(tainted)
        for node in body:
            targets: list[ast.AST] = []
            value: ast.AST | None = None
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
                targets, value = [node.target], node.value
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                targets, value = [node.target], node.iter
            elif isinstance(node, ast.NamedExpr):
                targets, value = [node.target], node.value
            if value is None or not any(n.id in tainted for n in _value_names(value)):
                continue
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        tainted.add(n.id)
        if len(tainted) == before:
            break
    return tainted


def _reads_values(expr: ast.AST, tainted: set[str]) -> bool:
    return any(n.id in tainted for n in _value_names(expr))


def _value_call(node: ast.AST, tainted: set[str], ctx: FileContext, names: set[str]) -> bool:
    """``t.sum()`` / ``torch.any(t)`` style call on input-derived values."""
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    if isinstance(f, ast.Attribute) and f.attr in names:
        qn = ctx.resolve(f)
        if qn is not None:  # a module function: torch.any(x), torch.isnan(x)
            return qn.startswith("torch.") and any(_reads_values(a, tainted) for a in node.args)
        return _reads_values(f.value, tainted)
    return False


def _mentions_guard(expr: ast.AST) -> bool:
    for n in ast.walk(expr):
        name = n.attr if isinstance(n, ast.Attribute) else n.id if isinstance(n, ast.Name) else None
        if name is not None and (name in _GUARD_WORDS or name.endswith("training")):
            return True
    return False


def _data_test(test: ast.AST, tainted: set[str], ctx: FileContext) -> bool:
    if _mentions_guard(test):
        return False
    return any(_value_call(n, tainted, ctx, _VALUE_METHODS) for n in _walk_values(test))


def _walk_values(expr: ast.AST) -> Iterator[ast.AST]:
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _META_BUILTINS:
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _conversion(node: ast.AST, tainted: set[str], ctx: FileContext) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    if isinstance(f, ast.Attribute) and f.attr in _CONVERSIONS and not node.args:
        return ctx.resolve(f) is None and _reads_values(f.value, tainted)
    if isinstance(f, ast.Name) and f.id in ("int", "float", "bool") and len(node.args) == 1 and f.id not in ctx.aliases:
        arg = node.args[0]
        return any(_value_call(n, tainted, ctx, _VALUE_METHODS) for n in _walk_values(arg)) or (
            isinstance(arg, ast.Subscript) and _reads_values(arg.value, tainted))
    return False


def _guarded(node: ast.AST, fn: ast.AST, ctx: FileContext) -> bool:
    """Under an `if` that steers tracing / compiling / training on purpose."""
    for anc in ctx.ancestors(node):
        if anc is fn:
            return False
        if isinstance(anc, (ast.If, ast.IfExp, ast.While)) and _mentions_guard(anc.test):
            return True
    return False


def _scan_function(fn: ast.FunctionDef | ast.AsyncFunctionDef, cls: ast.ClassDef, ctx: FileContext,
                   conversions: bool, depth: int) -> tuple[ast.AST, str] | None:
    tainted = _taint(fn, _input_params(fn))
    helpers: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
    for node in FileContext.walk_scope(fn.body):
        if isinstance(node, (ast.If, ast.While, ast.IfExp)) and _data_test(node.test, tainted, ctx):
            if not _guarded(node, fn, ctx):
                kind = "loops" if isinstance(node, ast.While) else "branches"
                return node.test if isinstance(node, ast.IfExp) else node, f"{kind} on tensor values"
        elif conversions and _conversion(node, tainted, ctx) and not _guarded(node, fn, ctx):
            return node, "turns a tensor into a Python number"
        elif (depth > 0 and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"
              and any(_reads_values(a, tainted) for a in [*node.args, *(k.value for k in node.keywords)])):
            helper = ctx.method(cls, node.func.attr)
            if helper is not None and helper is not fn:
                helpers.append(helper)
    for helper in helpers:
        found = _scan_function(helper, cls, ctx, conversions, depth - 1)
        if found is not None:
            return found
    return None
