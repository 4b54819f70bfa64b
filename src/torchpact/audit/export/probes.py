"""Sizes chosen after the paths were built, from what torch said while building them: both sides of
each bound the exported program's guards state (:mod:`.bounds`), and both sides of each size
comparison a ``TracerWarning`` pointed at (:mod:`.trace`). Every built artifact then runs on them."""

from __future__ import annotations

from torchpact.audit.eager import Eager
from torchpact.audit.export.results import PathResult
from torchpact.audit.variants import Dims, Variant, shape_variant


def probe_sizes(results: dict[str, PathResult]) -> list[tuple[str, int]]:
    """(dim name, size) pairs the paths' build details ask for, in order, without repeats."""
    out: list[tuple[str, int]] = []
    export = results.get("export")
    for item in (export.detail.get("bounded", []) if export is not None else []):
        for b in item["bounds"]:
            out += [(item["name"], b["accepted"]), (item["name"], b["refused"])]
    trace = results.get("trace")
    for cond in (trace.detail.get("conditions", []) if trace is not None else []):
        out += [(cond["dim"], size) for size in cond["sizes"]]
    return list(dict.fromkeys((n, s) for n, s in out if s >= 1))


def probe_variants(results: dict[str, PathResult], example: Variant, dims: Dims, eager: Eager) -> list[Variant]:
    """The probe sizes as variants along their dims, with eager's outputs (eager-rejected ones are
    listed as invalid and not run)."""
    out = []
    known = {v.name for v in eager.valid} | set(eager.invalid)
    for name, size in probe_sizes(results):
        if name not in dims.dims or size == dims.dims[name][0] or f"{name}={size}" in known:
            continue
        v = shape_variant(example.args, example.kwargs, dims, name, size)
        known.add(v.name)
        if eager.add(v):
            out.append(v)
    return out
