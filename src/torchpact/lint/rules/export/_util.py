"""What the export rules share: which calls export a model, with which exporter, and of what."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from torchpact.lint.context import FileContext, is_const, keyword
from torchpact.lint.rule import last_names

TRACE = "trace"    # torch.jit.trace and the legacy (TorchScript) ONNX exporter, which traces
EXPORT = "export"  # torch.export.export
ONNX = "onnx"      # torch.onnx.export with its default exporter (torch.export underneath)

_EXPORTERS = {
    "torch.jit.trace": (TRACE, ("func",)),
    "torch.jit._trace.trace": (TRACE, ("func",)),
    "torch.jit.trace_module": (TRACE, ("mod",)),
    "torch.export.export": (EXPORT, ("mod",)),
    "torch.onnx.export": (ONNX, ("model",)),
    "torch.onnx.utils.export": (ONNX, ("model",)),
}

# Values of these calls are ScriptModules (or ScriptFunctions).
SCRIPT_MAKERS = {
    "torch.jit.script", "torch.jit.trace", "torch.jit.trace_module", "torch.jit.load",
    "torch.jit.freeze", "torch.jit.optimize_for_inference",
}


@dataclass
class ExportCall:
    call: ast.Call
    qualname: str
    kind: str                 # TRACE / EXPORT / ONNX
    model: ast.expr | None    # the exported model expression
    legacy_onnx: bool         # torch.onnx.export(..., dynamo=False): the TorchScript exporter
    opaque_kwargs: bool       # the call passes **kwargs, so unseen keywords may be set

    @property
    def label(self) -> str:
        if self.qualname.startswith("torch.onnx."):
            return "torch.onnx.export(dynamo=False)" if self.legacy_onnx else "torch.onnx.export"
        return self.qualname.replace("torch.jit._trace.", "torch.jit.")
# The callees' last names, the engine's pre-filter (``Rule.calls``) for rules that start with export_call.
EXPORT_CALLEES = last_names(_EXPORTERS)


def export_call(node: ast.AST, ctx: FileContext) -> ExportCall | None:
    """The export call ``node`` is, or None. ONNX calls whose exporter cannot be told are skipped."""
    if not isinstance(node, ast.Call):
        return None
    qn = ctx.call_name(node)
    if qn not in _EXPORTERS:
        return None
    kind, model_kw = _EXPORTERS[qn]
    model = node.args[0] if node.args and not isinstance(node.args[0], ast.Starred) else None
    if model is None:
        for name in model_kw:
            model = keyword(node, name)
            if model is not None:
                break
    opaque = any(kw.arg is None for kw in node.keywords)
    legacy = False
    if kind == ONNX:
        dynamo = keyword(node, "dynamo")
        if dynamo is not None:
            if is_const(dynamo, False):
                legacy, kind = True, TRACE
            elif not is_const(dynamo, True):
                return None  # chosen at run time
        elif opaque:
            return None  # **kwargs may hold dynamo=False
    return ExportCall(node, qn, kind, model, legacy, opaque)


def call_chain(expr: ast.AST) -> tuple[ast.AST, list[ast.Call]]:
    """``M().to(dev).eval()`` -> (``M()``, [``.to(dev)``, ``.eval()``]): the root and the method calls on it."""
    methods: list[ast.Call] = []
    cur = expr
    while (isinstance(cur, ast.Call) and isinstance(cur.func, ast.Attribute)
           and isinstance(cur.func.value, ast.Call)):
        methods.append(cur)
        cur = cur.func.value
    methods.reverse()
    return cur, methods


def is_eval_call(call: ast.AST) -> bool:
    """``m.eval()`` or ``m.train(False)`` / ``m.train(mode=False)``."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
        return False
    if call.func.attr == "eval" and not call.args:
        return True
    if call.func.attr == "train":
        arg = call.args[0] if call.args else keyword(call, "mode")
        return arg is not None and (is_const(arg, False) or is_const(arg, 0))
    return False


def exports_torchscript(ec: ExportCall, ctx: FileContext) -> str | None:
    """The TorchScript maker (``torch.jit.script`` / ``trace`` / ``load``...) of every value of the model that
    ``ec`` hands to ``torch.export`` (directly or as the default ONNX exporter), which raises on it; else None."""
    if ec.legacy_onnx or ec.qualname.startswith("torch.jit") or ec.model is None:
        return None
    makers = [ctx.call_name(call_chain(v)[0]) for v in ctx.values(ec.model)]
    if not makers or not all(m in SCRIPT_MAKERS for m in makers):
        return None
    return makers[0]
