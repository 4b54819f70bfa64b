"""torch.jit.trace: runs ``forward`` once on the example and records the tensor operations.

What the trace baked in shows as a disagreement with eager on other values (TP701) or other shapes
(TP751), placed at the line of the ``TracerWarning`` torch emitted while tracing.
"""

from __future__ import annotations

from typing import Any

from torchpact.audit import _common as C
from torchpact.audit.export.checks import TRACE_BRANCH, TRACE_SHAPE
from torchpact.audit.export.inputs import bind, positional_only
from torchpact.audit.export.path import Context, Runner
from torchpact.audit.export.results import MISMATCH, PathResult
from torchpact.audit.variants import SHAPE, VALUE, Dims, Variant
from torchpact.findings import Finding


class TracePath:
    name, label = "trace", "torch.jit.trace"

    def unavailable(self) -> str | None:
        return None

    def build(self, model: Any, example: Variant, dims: Dims, result: PathResult) -> Runner:
        import torch

        plain = positional_only(example)
        fn = model if plain else bind(model, example)
        inputs = tuple(example.args) if plain else tuple(example.tensors())
        try:
            traced = torch.jit.trace(fn, inputs, check_trace=False)
        except RuntimeError as exc:
            if "at the output of the tracer" not in str(exc):
                raise
            # HF-style dict outputs: the default strict=True refuses them; strict=False traces them
            result.detail["strict_error"] = C.first_line(exc, 200)
            traced = torch.jit.trace(fn, inputs, check_trace=False, strict=False)
            result.detail["traced_with"] = "strict=False"
        return lambda v: traced(*(v.args if plain else v.tensors()))

    def findings(self, context: Context) -> tuple[list[Finding], set[str]]:
        found = trace_findings(context.results[self.name], context.location)
        return found, ({self.name} if found else set())


_TRACER_KINDS = (
    ("Python boolean", "branches on a tensor value (a Python `if`/`while` on a tensor)"),
    ("Python index", "uses a tensor as a Python index or size (e.g. `range(t)`, a loop over a dimension)"),
    ("Python number", "turns a tensor into a Python number"),
    ("Python integer", "turns a tensor into a Python integer"),
    ("Python float", "turns a tensor into a Python float"),
    ("Iterating over a tensor", "iterates over a tensor (a loop over its first dimension)"),
    ("registered as constants", "builds a tensor from Python values, which the trace keeps as a constant"),
)


def _tracer_kind(message: str) -> str:
    for key, words in _TRACER_KINDS:
        if key in message:
            return words
    return "does something the tracer cannot record"


def trace_findings(trace: PathResult, where: tuple[str | None, int | None]) -> list[Finding]:
    import torch

    shape_broken, value_broken = trace.broken(SHAPE), trace.broken(VALUE)
    if trace.status != MISMATCH or not (shape_broken or value_broken):
        return []
    first = (value_broken or shape_broken)[0]
    evidence = (f"the trace {'raises' if first.status == 'error' else 'differs from eager'} on {first.name}"
                + (f" (max abs err {first.max_abs_err:.3g})" if first.max_abs_err is not None and first.status != "error" else "")
                + (f": {first.problem}" if first.problem and first.status == "error" else ""))
    check = TRACE_BRANCH if value_broken else TRACE_SHAPE
    fix = (check is TRACE_BRANCH and "express the branch with tensor ops (torch.where / masking) or torch.cond "
           "with torch.export; do not read tensor values into Python") or (
           "keep sizes inside tensor ops (x.shape[0] passed to torch, -1 in view), or ship with torch.export "
           "and dynamic shapes")
    seen: set[tuple[str | None, int | None]] = set()
    out = []
    for w in trace.warnings:
        if w.category is not torch.jit.TracerWarning or (w.path, w.line) in seen or w.path is None:
            continue
        seen.add((w.path, w.line))
        src = C.source_line(w.path, w.line)
        message = (f"torch.jit.trace baked in the example here: this line {_tracer_kind(w.message)}"
                   + (f" (`{src}`)" if src else "") + f", and {evidence}")
        out.append(C.finding(check, message, path=w.path, line=w.line, fix=fix))
    if not out:
        what = "other values" if value_broken else "other shapes"
        out.append(C.finding(check, f"torch.jit.trace specialised this model to the example ({what} break it; "
                                   f"torch emitted no TracerWarning to point at the line): {evidence}",
                            path=where[0], line=where[1], fix=fix))
    return out
