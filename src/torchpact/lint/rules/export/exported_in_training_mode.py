from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, is_const, keyword
from torchpact.lint.rule import Hit, Rule
from torchpact.lint.rules._modules import layer_used
from torchpact.lint.rules.export._util import (
    EXPORT_CALLEES,
    ONNX,
    call_chain,
    export_call,
    is_eval_call,
)

_DROPOUTS = {"Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"}
_BATCHNORMS = {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "LazyBatchNorm1d",
               "LazyBatchNorm2d", "LazyBatchNorm3d"}
_F_DROPOUTS = {"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"}
_CONTAINERS = {"torch.nn.Sequential", "torch.nn.ModuleList", "torch.nn.ModuleDict"}
DROPOUT, BATCHNORM = "Dropout", "BatchNorm"
# torchvision constructors and the mode-dependent layers their default models hold (`vgg11_bn`: + BatchNorm).
_TORCHVISION = [
    (("resnet", "resnext", "wide_resnet", "densenet", "shufflenet", "regnet"), {BATCHNORM}),
    (("vgg", "alexnet", "squeezenet"), {DROPOUT}),
    (("mobilenet", "efficientnet", "inception", "googlenet", "mnasnet"), {BATCHNORM, DROPOUT}),
]
# Harmless calls a model may be handed to before the export without changing its mode.
_HARMLESS = {"print", "len", "isinstance", "type", "id", "repr", "str", "hasattr", "getattr", "format"}


class ExportedInTrainingMode(Rule):
    """A freshly built model with Dropout / BatchNorm is exported without `.eval()`.

    ## What it does
    Flags `torch.jit.trace`, `torch.export.export` and `torch.onnx.export` (default exporter) of a
    model built in the same file — a local `nn.Module` class, an `nn.Sequential(...)`, a torchvision
    classification model — that contains `Dropout` or `BatchNorm` layers and
    is never put in eval mode (`model.eval()`, `model.train(False)`, `M().eval()`) before the
    export call. A model handed to another function first (which may call `.eval()`), or loaded
    rather than built, is not flagged; neither is the legacy `torch.onnx.export(..., dynamo=False)`,
    which exports in eval mode by default.

    The condition it needs: a layer whose behaviour depends on the mode runs in the exported
    forward. A layer built but never called changes nothing: `self.drop = nn.Dropout(p)` that no
    code of the file reads (by that attribute name, or as a string for `getattr`), or an
    `nn.Dropout(...)` statement whose result is dropped, does not count (`rules/_modules.py`); one
    handed to a container (`nn.Sequential`, `nn.ModuleList`, `add_module`) or read anywhere does.

    ## Why is this bad?
    A new `nn.Module` is in training mode, and on torch 2.13 every exporter records the mode it finds:
    `torch.jit.trace` bakes in active dropout and BatchNorm with batch statistics — the traced module
    gives random, batch-dependent outputs, `.eval()` on it changes nothing, and tracing itself runs
    `forward` several times in training mode, overwriting the model's BatchNorm running statistics.
    `torch.export.export` records `aten.dropout(x, p, True)` and `aten.batch_norm(..., training=True)`
    (and `ep.module().eval()` raises `NotImplementedError: Calling eval() is not supported yet.`).
    The default `torch.onnx.export` ignores its `training=TrainingMode.EVAL` default: the ONNX graph
    keeps a `Dropout` node with `training_mode=True`, so onnxruntime zeroes activations at inference
    (its `BatchNormalization` does use the running statistics, so BatchNorm alone is not flagged
    for ONNX).
    (Exporting in training mode on purpose, e.g. for quantization-aware training, is the exception.)

    ## Fix safety
    No autofix: call `model.eval()` before exporting (if the model is trained afterwards, switch it
    back with `model.train()`).
    """

    code = "TP702"
    category = Category.EXPORT
    severity = Severity.WARNING
    requires = (
        "the exported model is built in this file with Dropout or BatchNorm and never put in eval mode before"
        " the export",
    )
    facts = ("new-module-is-in-training-mode", "export-in-training-mode-records-training-ops")
    message = ("a model with Dropout/BatchNorm is exported in training mode: the exported graph keeps "
               "training-mode dropout and batch statistics")
    fix_hint = "call `model.eval()` before exporting"
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
        self.drop = nn.Dropout(0.2)

    def forward(self, x):
        return self.drop(self.fc(x))

model = Net()
model.eval()
traced = torch.jit.trace(model, torch.randn(2, 4))
ep = torch.export.export(Net().eval(), (torch.randn(2, 4),))
""",
        """
import torch
from torch import nn

net = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))   # no mode-dependent layer
torch.onnx.export(net, (torch.randn(1, 4),), "net.onnx")
head = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1))
torch.onnx.export(head, (torch.randn(1, 4),), "head.onnx", dynamo=False)  # legacy: exports in eval
""",
        """
import torch
from torch import nn

def export(model, path):           # the caller decides the mode
    torch.onnx.export(model, (torch.randn(1, 4),), path)

def main():
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    train(model)                   # may end with model.eval()
    torch.jit.trace(model, torch.randn(2, 4))
""",
        """
import torch
from torch import nn

class Encoder(nn.Module):
    def __init__(self, use_dropout=False):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.spare_dropout = nn.Dropout(0.3)   # kept for old checkpoints, never called
        self.spare_norm = nn.BatchNorm1d(8)

    def forward(self, tokens):
        return torch.tanh(self.proj(tokens))

encoder = Encoder()
torch.jit.trace(encoder, torch.randn(2, 8))
""",
        """
import torch
import torch.nn as nn

class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = nn.Linear(4, 2)
        nn.Dropout(0.5)                        # built and dropped

    def forward(self, x):
        return self.out(x)

torch.export.export(Head(), (torch.randn(1, 4),))
""",
    ]
    invalid = [
        """
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.2)

    def forward(self, x):
        return self.drop(self.fc(x))

model = Net()
model.load_state_dict(torch.load("net.pt"))
traced = torch.jit.trace(model, torch.randn(2, 4))
""",
        """
import torch
from torch import nn

def export(path):
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU()).to("cpu")
    ep = torch.export.export(model, (torch.randn(1, 3, 8, 8),))
    torch.export.save(ep, path)
""",
        """
import torch
import torchvision

model = torchvision.models.mobilenet_v3_small(weights="DEFAULT")
torch.onnx.export(model, (torch.randn(1, 3, 224, 224),), "mobilenet.onnx")
""",
        """
import torch
from torch import nn

class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.spare_dropout = nn.Dropout(0.3)

    def forward(self, tokens):
        return getattr(self, "spare_dropout")(self.proj(tokens))

encoder = Encoder()
torch.jit.trace(encoder, torch.randn(2, 8))
""",
        """
import torch
import torch.nn as nn

class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList()
        self.layers.append(nn.Linear(4, 4))
        self.layers.append(nn.Dropout(0.5))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

torch.export.export(Head(), (torch.randn(1, 4),))
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        ec = export_call(node, ctx)
        if ec is None or ec.model is None or ec.legacy_onnx:
            return
        training = keyword(node, "training")
        if training is not None and isinstance(training, ast.Attribute) and training.attr == "TRAINING":
            return  # a training graph is asked for
        model = ec.model
        if isinstance(model, ast.Name):
            binds = ctx.bindings(model)
            if not binds or any(v is None for _, v in binds):
                return  # a parameter, a loop variable: built elsewhere
            values = [v for _, v in binds]
        elif isinstance(model, ast.Call):
            values = [model]
        else:
            return
        features: set[str] = set()
        for value in values:
            root, methods = call_chain(value)
            if any(is_eval_call(m) for m in methods):
                return
            found = _built_model_features(root, ctx)
            if found is None:
                return  # not a model built here
            features |= found
        if ec.kind == ONNX:
            features.discard(BATCHNORM)  # the ONNX exporter emits inference BatchNormalization
        if not features:
            return
        if isinstance(model, ast.Name) and _mode_may_change(model, node, ctx):
            return
        layers = " and ".join(sorted(features))
        name = ctx.segment(model) if isinstance(model, ast.Name) else "the model"
        baked = " and ".join(t for f, t in ((DROPOUT, "active dropout"), (BATCHNORM, "batch statistics"))
                             if f in features)
        if ec.kind == ONNX:
            consequence = ("the ONNX graph keeps Dropout with training_mode=True (the default exporter "
                           "ignores `training=TrainingMode.EVAL`), so onnxruntime drops activations at inference")
        elif ec.kind == "export":
            consequence = (f"the ExportedProgram records {baked} (training=True), and "
                           "`ep.module().eval()` raises NotImplementedError")
        else:
            consequence = f"the trace bakes in {baked}; `.eval()` on the traced module does not undo it"
            if BATCHNORM in features:
                consequence += ", and tracing overwrites the BatchNorm running statistics"
        message = (f"{ec.label} of `{name}`, which has {layers} and is still in training mode "
                   f"(never `.eval()`-ed): {consequence}")
        yield self.hit(node, message=message, subject=name if isinstance(model, ast.Name) else None)


def _built_model_features(root: ast.AST, ctx: FileContext) -> set[str] | None:
    """Mode-dependent features of the model ``root`` constructs; None when it is not a construction seen here."""
    if not isinstance(root, ast.Call):
        return None
    qn = ctx.call_name(root)
    if isinstance(root.func, ast.Name) and root.func.id in ctx.module_classes:
        return _class_features(ctx.module_classes[root.func.id], ctx, set())
    if qn in _CONTAINERS:
        return _expr_features(root, ctx, set())
    if qn and qn.startswith("torchvision.models."):
        last = qn.rsplit(".", 1)[-1]
        for prefixes, feats in _TORCHVISION:
            if last.startswith(prefixes):
                return set(feats) | ({BATCHNORM} if last.endswith("_bn") else set())
    if qn and qn.startswith("torch.nn.") and qn.rsplit(".", 1)[-1] in _DROPOUTS | _BATCHNORMS:
        return _expr_features(root, ctx, set())
    return None


def _layer_feature(call: ast.Call, ctx: FileContext) -> str | None:
    qn = ctx.call_name(call)
    if qn is None:
        return None
    last = qn.rsplit(".", 1)[-1]
    if qn.startswith("torch.nn.") and last in _DROPOUTS:
        p = call.args[0] if call.args else keyword(call, "p")
        if p is not None and isinstance(p, ast.Constant) and p.value in (0, 0.0):
            return None
        return DROPOUT
    if qn.startswith("torch.nn.") and last in _BATCHNORMS:
        track = keyword(call, "track_running_stats")
        return None if track is not None and is_const(track, False) else BATCHNORM
    if qn.startswith("torch.nn.functional.") and last in _F_DROPOUTS:
        training = call.args[2] if len(call.args) > 2 else keyword(call, "training")
        if training is not None and isinstance(training, ast.Attribute) and training.attr == "training":
            return DROPOUT
    return None


def _is_layer(call: ast.Call, ctx: FileContext) -> bool:
    """``nn.Dropout(...)`` (a module to call), not ``F.dropout(...)`` (a call that runs)."""
    qn = ctx.call_name(call) or ""
    return qn.startswith("torch.nn.") and not qn.startswith("torch.nn.functional.")


def _expr_features(expr: ast.AST, ctx: FileContext, seen: set[str]) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(expr):
        if isinstance(node, ast.Call):
            f = _layer_feature(node, ctx)
            if f and (not _is_layer(node, ctx) or layer_used(node, ctx)):
                out.add(f)  # a layer built but never called changes nothing
            elif isinstance(node.func, ast.Name) and node.func.id in ctx.module_classes:
                out |= _class_features(ctx.module_classes[node.func.id], ctx, seen)
    return out


def _class_features(cls: ast.ClassDef, ctx: FileContext, seen: set[str]) -> set[str]:
    if cls.name in seen:
        return set()
    seen.add(cls.name)
    out: set[str] = set()
    for node in ast.walk(cls):
        if (isinstance(node, ast.Call) and is_eval_call(node) and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "self"):
            return set()  # the class puts itself in eval mode
    out |= _expr_features(cls, ctx, seen)
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in ctx.module_classes:
            out |= _class_features(ctx.module_classes[base.id], ctx, seen)
    return out


def _mode_may_change(name: ast.Name, call: ast.Call, ctx: FileContext) -> bool:
    """Whether ``name`` is eval-ed, or handed to other code, before ``call``.

    A model bound in the call's own function is followed there, up to the call; a module-level one
    everywhere in the file (another function may switch it).
    """
    scope = ctx.scope(call)
    local = scope is not ctx.tree and name.id in ctx.assignments(scope)
    pos = (call.lineno, call.col_offset)
    for node in ctx.nodes(ast.Call):
        if node is call:
            continue
        node_scope = ctx.scope(node)
        if node_scope is scope:
            if (node.lineno, node.col_offset) >= pos:
                continue
        elif local or name.id in ctx.assignments(node_scope):
            continue  # another variable of the same name
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == name.id:
            if is_eval_call(node) or f.attr == "apply":
                return True
        if isinstance(f, ast.Name) and f.id in _HARMLESS:
            continue
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            if isinstance(arg, ast.Starred):
                arg = arg.value
            if isinstance(arg, ast.Name) and arg.id == name.id and export_call(node, ctx) is None:
                return True
    return False
