"""torch.export.export with the inferred dims marked ``Dim.AUTO`` (non-strict, torch 2.13's default;
strict as a second build), and the dims the exported program fixed to the example's size (TP752)."""

from __future__ import annotations

import logging
import traceback
from typing import Any

from torchpact.audit import _common as C
from torchpact.audit.export.checks import EXPORT_SPECIALISED
from torchpact.audit.export.inputs import exportable, input_names, tensor_leaf_indices
from torchpact.audit.export.path import Context, Runner
from torchpact.audit.export.results import FAILED, MISMATCH, OK, PathResult
from torchpact.audit.variants import Dims, Variant
from torchpact.findings import Finding, Severity


class TorchExportPath:
    name, label = "export", "torch.export.export"

    def __init__(self, strict: bool = False) -> None:
        self.strict = strict

    def unavailable(self) -> str | None:
        return None

    def build(self, model: Any, example: Variant, dims: Dims, result: PathResult) -> Runner:
        events = _Specialisations()
        module, args, dynamic_shapes, call = exportable(model, example, dims)
        ep = _export(module, args, dynamic_shapes, self.strict, events)
        fixed = _specialised(model, ep, example, dims)
        for item in fixed:
            for source, value, path, line in events.events:
                if f"size()[{item['dim']}]" in source and str(value) == str(item["size"]):
                    item["path"], item["line"] = path, line
                    break
        result.detail.setdefault("specialised", fixed)
        exported = ep.module()
        return lambda v: call(exported, v)

    def findings(self, context: Context) -> tuple[list[Finding], set[str]]:
        import torch

        rnn = any(isinstance(m, torch.nn.RNNBase) for m in context.model.modules())
        onnx = context.results.get("onnx")
        found = export_findings(context.results[self.name], onnx, rnn)
        if not found:
            return [], set()
        return found, {self.name} | ({"onnx"} if onnx is not None and onnx.status == MISMATCH else set())


class _Specialisations(logging.Handler):
    """Collects torch's 'Specializing <source> to <n>' events with the model line at that moment."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.events: list[tuple[str, Any, str | None, int | None]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if not str(record.msg).startswith("Specializing"):
            return
        try:
            from torch._guards import TracingContext

            stack = list(TracingContext.extract_stack() or [])
        except Exception:
            stack = []
        frame = C.user_frame(stack) or C.user_frame(traceback.extract_stack()[:-1])
        source, value = (record.args + (None, None))[:2] if isinstance(record.args, tuple) else (None, None)
        self.events.append((str(source), value, frame.filename if frame else None, frame.lineno if frame else None))


def _export(module: Any, args: tuple, dynamic_shapes: Any, strict: bool, events: _Specialisations) -> Any:
    import torch
    import torch.fx.experimental._config as fx_config

    logger = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    handlers, propagate = logger.handlers[:], logger.propagate
    logger.handlers, logger.propagate = [events], False  # torch would print each event on stderr
    try:
        with fx_config.patch(print_specializations=True):
            return torch.export.export(module, args, dynamic_shapes=dynamic_shapes, strict=strict)
    finally:
        logger.handlers, logger.propagate = handlers, propagate


def _specialised(model: Any, ep: Any, example: Variant, dims: Dims) -> list[dict[str, Any]]:
    """The marked dimensions the exported program fixed to a number."""
    from torch.export.graph_signature import InputKind, TensorArgument
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    names = input_names(model, example)
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    user = [s.arg.name for s in ep.graph_signature.input_specs
            if s.kind == InputKind.USER_INPUT and isinstance(s.arg, TensorArgument)]
    out = []
    for i, pname in zip(tensor_leaf_indices(example), user):
        val = placeholders[pname].meta.get("val")
        for d, dim_name in dims.of_leaf(i).items():
            size = val.shape[d] if val is not None else None
            if size is not None and is_concrete_int(size):
                out.append({"input": names[i], "dim": d, "name": dim_name, "size": int(size)})
    return out


def _rnn_fix() -> str:
    """The fix for a time length torch.export fixed through a recurrent module, on the torch this check ran on."""
    import torch

    return (f"torch.export (on torch {torch.__version__}, where this check saw it) fixes the time length an "
            "nn.LSTM / nn.GRU / nn.RNN runs over, whatever the dynamic_shapes say: pad sequences to one length, or "
            "export one program per length you serve")


def export_findings(export: PathResult, onnx: PathResult | None, rnn: bool = False) -> list[Finding]:
    """TP752 per dimension the exported program fixed; ``rnn``: the model runs a recurrent module."""
    out = []
    strict_ok = export.detail.get("strict", {}).get("status") == OK
    for item in export.detail.get("specialised", []):
        src = C.source_line(item.get("path"), item.get("line"))
        broke = [v.name for v in export.broken() if v.name.startswith(item["name"] + "=")]
        onnx_broke = [v for v in (onnx.broken() if onnx is not None else []) if v.name.startswith(item["name"] + "=")]
        rejected = [v.name for v in onnx_broke if v.status == "error"]
        wrong = [v for v in onnx_broke if v.status != "error"]
        onnx_text = f"; the ONNX model rejects {', '.join(rejected)}" if rejected else ""
        onnx_ok = [v.name for v in (onnx.variants if onnx is not None and onnx.status != FAILED else [])
                   if v.name in broke and v.status == OK]
        if onnx_ok:
            onnx_text += f"; the ONNX model run in onnxruntime accepts {', '.join(onnx_ok)} and matches eager"
        if wrong:
            errs = [v.max_abs_err for v in wrong if v.max_abs_err is not None]
            onnx_text += (f"; the ONNX model accepts {', '.join(v.name for v in wrong)} but returns wrong results ("
                          + (f"max abs err {max(errs):.3g})" if errs else f"{wrong[0].problem})"))
        message = (f"torch.export silently fixed {item['input']}.shape[{item['dim']}] ({item['name']}, marked "
                   f"Dim.AUTO) to the example's {item['size']}"
                   + (f" because of this line (`{src}`)" if src else "")
                   + (f"; the exported program rejects {', '.join(broke)}" if broke else "")
                   + onnx_text
                   + ("; torch.export.export(..., strict=True) kept it dynamic" if strict_ok else ""))
        severity = Severity.ERROR if wrong else None  # a silently wrong ONNX model, not just a refusal
        out.append(C.finding(EXPORT_SPECIALISED, message, severity=severity, path=item.get("path"), line=item.get("line"),
                            subject=f"{item['input']}.shape[{item['dim']}]",
                            fix=_rnn_fix() if rnn and item["name"] in ("time", "seq", "length") else
                            "remove the size-specific code, or mark the dimension Dim.STATIC if one size is intended"))
    return out
