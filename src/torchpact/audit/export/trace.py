"""torch.jit.trace: runs ``forward`` once on the example and records the tensor operations.

What the trace baked in shows as a disagreement with eager on other values (TP701) or other shapes
(TP751), placed at the line of the ``TracerWarning`` torch emitted while tracing.
"""

from __future__ import annotations

from typing import Any

from torchpact.audit import _common as C
from torchpact.audit.export.checks import TRACE_BRANCH, TRACE_SHAPE
from torchpact.audit.export.conditions import reading
from torchpact.audit.export.inputs import bind, positional_only
from torchpact.audit.export.path import Context, Runner
from torchpact.audit.export.results import MISMATCH, PathResult, VariantResult
from torchpact.audit.variants import SHAPE, VALUE, Dims, Variant
from torchpact.findings import Finding, Severity


class TracePath:
    name, label = "trace", "torch.jit.trace"

    def unavailable(self) -> str | None:
        return None

    def build(self, model: Any, example: Variant, dims: Dims, result: PathResult) -> Runner:
        import torch

        plain = positional_only(example)
        fn = model if plain else bind(model, example)
        inputs = tuple(example.args) if plain else tuple(example.tensors())
        conditions: list[dict[str, Any]] = []
        with reading(dims, conditions):
            try:
                traced = torch.jit.trace(fn, inputs, check_trace=False)
            except RuntimeError as exc:
                if "at the output of the tracer" not in str(exc):
                    raise
                # HF-style dict outputs: the default strict=True refuses them; strict=False traces them
                result.detail["strict_error"] = C.first_line(exc, 200)
                conditions.clear()
                traced = torch.jit.trace(fn, inputs, check_trace=False, strict=False)
                result.detail["traced_with"] = "strict=False"
        if conditions:
            result.detail["conditions"] = conditions
        return lambda v: traced(*(v.args if plain else v.tensors()))

    def findings(self, context: Context) -> tuple[list[Finding], set[str]]:
        found = trace_findings(context.results[self.name], context.location)
        return found, ({self.name} if any(f.severity is not Severity.INFO for f in found) else set())


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


def _evidence(v: VariantResult) -> str:
    return (f"the trace {'raises' if v.status == 'error' else 'differs from eager'} on {v.name}"
            + (f" (max abs err {v.max_abs_err:.3g})" if v.max_abs_err is not None and v.status != "error" else "")
            + (f": {v.problem}" if v.problem and v.status == "error" else ""))


_FIX_BRANCH = ("express the branch with tensor ops (torch.where / masking) or torch.cond with torch.export; do not "
               "read tensor values into Python")
_FIX_SHAPE = ("keep sizes inside tensor ops (x.shape[0] passed to torch, -1 in view), or ship with torch.export and "
              "dynamic shapes")


def trace_findings(trace: PathResult, where: tuple[str | None, int | None]) -> list[Finding]:
    """One finding per line torch emitted a ``TracerWarning`` at: ``error`` with the variant that shows
    the trace wrong, ``info`` when no variant did (naming the sizes tried past the branch, when the
    condition could be read); and one at ``forward`` when the trace is wrong and torch warned nowhere."""
    import torch

    shape_broken, value_broken = trace.broken(SHAPE), trace.broken(VALUE)
    wrong = trace.status == MISMATCH and bool(shape_broken or value_broken)
    conditions: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for c in trace.detail.get("conditions", []):
        conditions.setdefault((c["path"], c["line"]), []).append(c)
    seen: set[tuple[str | None, int | None]] = set()
    out = []
    for w in trace.warnings:
        if w.category is not torch.jit.TracerWarning or (w.path, w.line) in seen or w.path is None:
            continue
        seen.add((w.path, w.line))
        read = conditions.get((w.path, w.line), [])
        src = C.source_line(w.path, w.line)
        here = (f"torch.jit.trace baked in the example here: this line {_tracer_kind(w.message)}"
                + (f" (`{src}`)" if src else ""))
        along = [v for v in shape_broken if any(v.name.startswith(c["dim"] + "=") for c in read)]
        past = [f"{c['dim']}={s}" for c in read for s in c["sizes"]]
        if wrong and (along or not read):
            first = (along or value_broken or shape_broken)[0]
            check = TRACE_SHAPE if along or not value_broken else TRACE_BRANCH
            chosen = (f" (torchpact read `{read[0]['text']}` and ran the trace past it)"
                      if along and first in along else "")
            out.append(C.finding(check, f"{here}, and {_evidence(first)}{chosen}", path=w.path, line=w.line,
                                 fix=_FIX_SHAPE if check is TRACE_SHAPE else _FIX_BRANCH))
            continue
        check = TRACE_SHAPE if read or "index" in _tracer_kind(w.message) or "iterates" in _tracer_kind(w.message) \
            else TRACE_BRANCH
        tried = (f"torchpact ran the trace on both sides of `{read[0]['text']}` ({', '.join(past)}) and it matched "
                 "eager there" if read else
                 "no input torchpact tried showed a difference, and the condition could not be read to choose one "
                 "past the branch")
        out.append(C.finding(check, f"torch warned while tracing this line (`{src or 'source not available'}`): it "
                             f"{_tracer_kind(w.message)}, which the trace keeps as the example's; {tried}",
                             severity=Severity.INFO, path=w.path, line=w.line,
                             fix="check that every input you serve takes the example's side of this line, or "
                                 + (_FIX_SHAPE if check is TRACE_SHAPE else _FIX_BRANCH)))
    if wrong and not any(f.severity is not Severity.INFO for f in out):
        first = (value_broken or shape_broken)[0]
        check = TRACE_BRANCH if value_broken else TRACE_SHAPE
        what = "other values" if value_broken else "other shapes"
        out.append(C.finding(check, f"torch.jit.trace specialised this model to the example ({what} break it; "
                                    f"torch emitted no TracerWarning to point at the line): {_evidence(first)}",
                             path=where[0], line=where[1], fix=_FIX_BRANCH if value_broken else _FIX_SHAPE))
    return out
