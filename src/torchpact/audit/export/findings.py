"""Findings about the paths together: objects no path can carry, build failures, disagreements no
path-specific finding explains, list inputs of another length, and the deprecated TorchScript paths."""

from __future__ import annotations

import re

from torchpact.audit import _common as C
from torchpact.audit.eager import Eager
from torchpact.audit.export.checks import (
    JIT_DEPRECATED,
    ONNX_NUMERICS,
    OUTPUT_TYPE,
    PATH_DIFFERS,
    PATH_FAILED,
    TRACE_BRANCH,
)
from torchpact.audit.export.results import FAILED, MISMATCH, OK, PathResult
from torchpact.audit.variants import EXAMPLE, Variant, flatten_inputs
from torchpact.findings import Finding, Severity

CARRY = r"not a known type|cannot infer type of|can be output from traced functions|unrecognized type"


def output_type_findings(eager: Eager, paths: dict[str, PathResult]) -> list[Finding]:
    out = []
    foreign_types = sorted({t for _, t in eager.foreign})
    blocked = [n for n, p in paths.items() if p.status == FAILED and p.error is not None
               and re.search(CARRY, C.error_text(p.error))]
    for typ in foreign_types:
        where = [n for n, t in eager.foreign if t == typ]
        short = typ.rsplit(".", 1)[-1]
        cache = "cache" in short.lower()
        fix = ("pass `use_cache=False` (no cache object in the output)" if cache else
               "return tensors only, or register the type with torch.utils._pytree.register_pytree_node (torch.export)")
        fix += "; with Hugging Face models also `return_dict=False`"
        message = (f"the output holds a {short} object at {where[0]}"
                   + (f", which {', '.join(blocked)} cannot carry: they fail" if blocked else
                      ", which the export paths cannot carry"))
        out.append(C.finding(OUTPUT_TYPE, message, subject=where[0], fix=fix))
    trace = paths.get("trace")
    if trace is not None and "strict_error" in trace.detail:
        out.append(C.finding(OUTPUT_TYPE, "the output is a dict (or holds one): torch.jit.trace refuses it with its "
                            "default strict=True ('Encountering a dict at the output of the tracer'); torchpact "
                            "traced with strict=False", severity=Severity.INFO,
                            fix="return a tuple (Hugging Face: `return_dict=False`) or trace with strict=False"))
    return out


def failure_findings(paths: dict[str, PathResult], covered: set[str]) -> list[Finding]:
    out = []
    branch: dict[tuple[str | None, int | None], list[str]] = {}
    for name, p in paths.items():
        if p.status != FAILED or name in covered or p.error is None:
            continue
        path, line = C.exception_location(p.error)
        if "Could not guard on data-dependent expression" in C.error_text(p.error):
            branch.setdefault((path, line), []).append(LABELS[name])
            continue
        severity = Severity.INFO if name in ("trace", "script") else Severity.WARNING
        out.append(C.finding(PATH_FAILED, f"{LABELS[name]} failed: {p.reason}", severity=severity, path=path,
                            line=line, subject=name))
    for (path, line), labels in branch.items():
        src = C.source_line(path, line)
        out.append(C.finding(TRACE_BRANCH, f"{' and '.join(labels)} raise{'s' * (len(labels) == 1)} on this "
                            "data-dependent branch" + (f" (`{src}`)" if src else "")
                            + ": 'Could not guard on data-dependent expression'",
                            severity=Severity.WARNING, path=path, line=line,
                            fix="express the branch with tensor ops (torch.where / masking) or torch.cond"))
    return out


LABELS = {"trace": "torch.jit.trace", "script": "torch.jit.script", "export": "torch.export.export",
           "onnx": "torch.onnx.export"}


def mismatch_findings(paths: dict[str, PathResult], covered: set[str]) -> list[Finding]:
    out = []
    export = paths.get("export")
    for name, p in paths.items():
        broken = p.broken()
        if p.status != MISMATCH or name in covered or not broken:
            continue
        first = broken[0]
        if name == "onnx" and export is not None and export.status == OK and all(v.status == MISMATCH for v in broken):
            out.append(C.finding(ONNX_NUMERICS, f"onnxruntime's result differs from eager by up to {p.max_abs_err:.3g} "
                                f"(relative {p.max_rel_err:.3g}) on {', '.join(v.name for v in broken)}, while the "
                                "torch.export program matches", subject="onnx",
                                fix="try optimize=False or another opset; keep the sensitive op in higher precision"))
            continue
        label = "the ONNX model" if name == "onnx" else LABELS[name]
        verb = "raises" if first.status == "error" else "differs from eager"
        severity = Severity.WARNING if all(v.status == "error" for v in broken) else Severity.ERROR
        out.append(C.finding(PATH_DIFFERS, f"{label} {verb} on {', '.join(v.name for v in broken)}: {first.problem}",
                            severity=severity, subject=name))
    return out


def structure_findings(paths: dict[str, PathResult], variants: list[Variant]) -> list[Finding]:
    """One finding for the artifacts that raise on another number of images (a list input's length
    is part of the input structure trace, torch.export and ONNX are built for); those variants are
    then explained for the other findings."""
    counts = {v.name for v in variants if v.dim == "images"}
    if not counts:
        return []
    rejected: dict[str, list[str]] = {}
    for name, p in paths.items():
        names = [v.name for v in p.broken() if v.name in counts and v.status == "error"]
        if names:
            rejected[name] = names
            p.explained.update(names)
    if not rejected:
        return []
    n = next(len(flatten_inputs(v.args, v.kwargs)[0]) for v in variants if v.kind == EXAMPLE)
    labels = " and ".join(LABELS[p] for p in rejected)
    tried = sorted({x for names in rejected.values() for x in names})
    return [C.finding(PATH_DIFFERS, f"{labels} {'take' if len(rejected) > 1 else 'takes'} only the example's "
                     f"number of images: the length of a list input is part of the input structure the artifact "
                     f"is built for, and {', '.join(tried)} raise{'s' * (len(tried) == 1)} where eager accepts them",
                     severity=Severity.WARNING, subject="images",
                     fix="batch the images into one padded [N, 3, H, W] tensor with a dynamic N, or build one "
                         f"artifact per number of images you serve (this one takes {n} input tensors)")]


def deprecation_findings(paths: dict[str, PathResult]) -> list[Finding]:
    import torch

    texts = []
    for name in ("trace", "script"):
        p = paths.get(name)
        if p is None:
            continue
        for w in p.warnings:
            if (issubclass(w.category, DeprecationWarning) and "is deprecated" in w.message
                    and f"torch.jit.{name}" in w.message):
                texts.append(w.message)
                break
    if not texts:
        return []
    used = " and ".join(n for n in ("torch.jit.trace", "torch.jit.script") if any(f"`{n}`" in t for t in texts))
    verb = "are" if " and " in used else "is"
    return [C.finding(JIT_DEPRECATED, f"{used} {verb} deprecated on torch {torch.__version__}: '{texts[0]}'",
                     fix="ship with torch.export.export or the default torch.onnx.export")]
