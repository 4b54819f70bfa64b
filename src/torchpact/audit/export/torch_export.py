"""torch.export.export with the inferred dims marked ``Dim.AUTO`` (non-strict, torch 2.13's default;
strict as a second build), and what the exported program did to them: dims fixed to the example's
size, and dims whose guards refuse some sizes (:mod:`.bounds`); the findings in :mod:`.specialised`."""

from __future__ import annotations

import logging
import re
import traceback
from typing import Any

from torchpact.audit import _common as C
from torchpact.audit.export import bounds as B
from torchpact.audit.export.inputs import exportable, input_names, tensor_leaf_indices
from torchpact.audit.export.path import Context, Runner
from torchpact.audit.export.results import FAILED, MISMATCH, OK, PathResult
from torchpact.audit.export.specialised import export_findings
from torchpact.audit.variants import Dims, Variant, shape_variant
from torchpact.findings import Finding


class TorchExportPath:
    name, label = "export", "torch.export.export"

    def __init__(self, strict: bool = False) -> None:
        self.strict = strict

    def unavailable(self) -> str | None:
        return None

    def build(self, model: Any, example: Variant, dims: Dims, result: PathResult) -> Runner:
        events = _ShapeEvents()
        module, args, dynamic_shapes, call = exportable(model, example, dims)
        ep = _export(module, args, dynamic_shapes, self.strict, events)
        fixed, bounded = _read_dims(model, ep, example, dims, events)
        for item in fixed:
            for source, value, path, line in events.specialisations:
                if f"size()[{item['dim']}]" in source and str(value) == str(item["size"]):
                    item["path"], item["line"] = path, line
                    break
        result.detail.setdefault("specialised", fixed)
        result.detail.setdefault("bounded", bounded)
        if any(b["zero_one"] for item in bounded for b in item["bounds"]) and not self.strict:
            result.detail["size_oblivious"] = _oblivious_export(module, args, dynamic_shapes, call, bounded,
                                                                example, dims)
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


class _ShapeEvents(logging.Handler):
    """torch's 'Specializing <source> to <n>' and '<guard> [guard added]' events, each with the model
    line at that moment."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.specialisations: list[tuple[str, Any, str | None, int | None]] = []
        self.guards: dict[str, tuple[str | None, int | None]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        text = str(record.msg)
        if not text.startswith("Specializing") and "[guard added]" not in text:
            return
        try:
            from torch._guards import TracingContext

            stack = list(TracingContext.extract_stack() or [])
        except Exception:
            stack = []
        frame = C.user_frame(stack) or C.inner_user_frame(traceback.extract_stack()[:-1])
        where = (frame.filename, frame.lineno) if frame else (None, None)
        if text.startswith("Specializing"):
            source, value = (record.args + (None, None))[:2] if isinstance(record.args, tuple) else (None, None)
            self.specialisations.append((str(source), value, *where))
            return
        m = re.match(r"eval (?:\[guard suppressed\] )?(.+?) \[guard added\]", record.getMessage())
        if m and m.group(1) not in self.guards:
            self.guards[m.group(1)] = where


def _export(module: Any, args: tuple, dynamic_shapes: Any, strict: bool, events: _ShapeEvents) -> Any:
    import torch
    import torch.fx.experimental._config as fx_config

    logger = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    handlers, propagate, level = logger.handlers[:], logger.propagate, logger.level
    logger.handlers, logger.propagate = [events], False  # torch would print each event on stderr
    logger.setLevel(logging.INFO)  # the guards are logged at INFO, with the line that added them
    try:
        with fx_config.patch(print_specializations=True):
            return torch.export.export(module, args, dynamic_shapes=dynamic_shapes, strict=strict)
    finally:
        logger.handlers, logger.propagate = handlers, propagate
        logger.setLevel(level)


def _read_dims(model: Any, ep: Any, example: Variant, dims: Dims,
               events: _ShapeEvents) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The marked dims the exported program fixed to a number, and those whose guards refuse some sizes."""
    import sympy
    from torch.export.graph_signature import InputKind, TensorArgument
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    names = input_names(model, example)
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    user = [s.arg.name for s in ep.graph_signature.input_specs
            if s.kind == InputKind.USER_INPUT and isinstance(s.arg, TensorArgument)]
    marked = []
    symbols: dict[str, str] = {}
    for i, pname in zip(tensor_leaf_indices(example), user, strict=False):
        val = placeholders[pname].meta.get("val")
        if val is None:
            continue
        for d, size in enumerate(val.shape):
            if not is_concrete_int(size) and isinstance(size.node.expr, sympy.Symbol):
                symbols.setdefault(str(size.node.expr), f"{names[i]}.shape[{d}]")
        marked += [(i, d, dim_name, val.shape[d]) for d, dim_name in dims.of_leaf(i).items()]
    fixed, bounded, seen = [], [], set()
    for i, d, dim_name, size in marked:
        if is_concrete_int(size):
            fixed.append({"input": names[i], "dim": d, "name": dim_name, "size": int(size)})
            continue
        symbol = size.node.expr
        if not isinstance(symbol, sympy.Symbol) or symbol in seen:
            continue
        seen.add(symbol)
        found = B.bounds(symbol, size.node.shape_env, _finite_upper(ep, symbol), symbols, events.guards)
        if found:
            path, line = next((b.where for b in found if b.where[0]), (None, None))
            rc = ep.range_constraints.get(symbol)
            edges = {e for e in (_int(rc.lower), _int(rc.upper)) if e is not None} if rc is not None else set()
            bounded.append({"input": names[i], "dim": d, "name": dim_name, "refused": B.refused_text(found),
                            "path": path, "line": line, "range_constraints": str(rc),
                            "range_shows_it": all(b.accepted in edges for b in found),
                            "bounds": [{"refused": b.refused, "accepted": b.accepted, "guards": b.guards,
                                        "zero_one": b.zero_one} for b in found]})
    return fixed, bounded


def _int(x: Any) -> int | None:
    """A range end as an int; None for torch's int_oo (and anything else not a finite integer)."""
    from torch.utils._sympy.numbers import int_oo

    if x is None or x == int_oo or x == -int_oo:
        return None
    try:
        return int(x)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return None


def _finite_upper(ep: Any, symbol: Any) -> int | None:
    rc = ep.range_constraints.get(symbol)
    return _int(rc.upper) if rc is not None else None


def _oblivious_export(module: Any, args: tuple, dynamic_shapes: Any, call: Any, bounded: list[dict[str, Any]],
                      example: Variant, dims: Dims) -> dict[str, Any]:
    """Whether exporting with ``backed_size_oblivious=True`` (torch.export's way around 0/1
    specialisation) gives a program that takes the sizes the guards refused, and matches eager there."""
    import torch
    import torch.fx.experimental._config as fx_config

    refused = sorted({(item["name"], b["refused"]) for item in bounded for b in item["bounds"] if b["zero_one"]})
    try:
        with fx_config.patch(backed_size_oblivious=True), C.quiet():
            program = torch.export.export(module, args, dynamic_shapes=dynamic_shapes).module()
        for name, size in refused:
            v = shape_variant(example.args, example.kwargs, dims, name, size)
            with torch.no_grad(), C.quiet():
                ok = C.compare(C.output_leaves(call(module, v))[0],
                               [t for _, t in C.output_leaves(call(program, v))[0]]).ok
            if not ok:
                return {"status": MISMATCH, "sizes": [f"{n}={s}" for n, s in refused], "at": f"{name}={size}"}
    except Exception as exc:
        return {"status": FAILED, "sizes": [f"{n}={s}" for n, s in refused], "error": C.first_line(exc, 200)}
    return {"status": OK, "sizes": [f"{n}={s}" for n, s in refused]}
