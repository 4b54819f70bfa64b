"""What every path goes through: build the artifact, run it on each variant against eager's outputs,
time it next to eager, and say in words why it failed."""

from __future__ import annotations

import re
import time
from typing import Any, Callable

from torchpact.audit import _common as C
from torchpact.audit import timing as T
from torchpact.audit.eager import Eager
from torchpact.audit.export.results import FAILED, MISMATCH, OK, PathResult, VariantResult
from torchpact.audit.variants import Variant


def run_variants(result: PathResult, run: Callable[[Variant], Any], eager: Eager,
                 variants: list[Variant] | None = None) -> None:
    import torch

    for v in eager.valid if variants is None else variants:
        try:
            with torch.no_grad(), C.quiet():
                out = run(v)
        except Exception as exc:
            result.variants.append(VariantResult(v.name, v.kind, "error", problem=C.first_line(exc, 240)))
            continue
        tensors, _ = C.output_leaves(out)
        cmp = C.compare(eager.refs[v.name], [t for _, t in tensors])
        result.variants.append(VariantResult(v.name, v.kind, OK if cmp.ok else MISMATCH,
                                             cmp.max_abs_err, cmp.max_rel_err, cmp.problem))


def artifact_latency(run: Callable[[Variant], Any], eager_call: Callable[[], Any], example: Variant,
             eager: dict[str, Any], budget_s: float) -> dict[str, Any]:
    """p50 / p99 ms of the artifact on the example against ``eager`` (timed in the clean state).

    Eager is timed again in rounds alternating with the artifact, so that both see the same machine
    load; when it no longer runs at its clean-state speed, the two are said to be unstable rather
    than compared. ``unstable`` says why, when so.
    """
    import torch

    with torch.no_grad(), C.quiet():
        now = T.timed({"eager": eager_call, "artifact": lambda: run(example)}, budget_s=budget_s)
    a = now["artifact"]
    out: dict[str, Any] = {"artifact": a.get("p50"), "eager": eager.get("p50"),
                           "artifact_p99": a.get("p99"), "eager_p99": eager.get("p99")}
    reasons = [f"artifact: {a.get('unstable') or a.get('error')}" if a.get("unstable") or a.get("error") else None,
               f"eager: {eager['unstable']}" if eager.get("unstable") else None,
               T.drift(eager, now["eager"])]
    why = "; ".join(r for r in reasons if r)
    if why:
        out["unstable"] = why
    return out


def run_path(name: str, build: Callable[[PathResult], Callable[[Variant], Any]], eager: Eager,
              example: Variant, latency: Callable[[Callable[[Variant], Any]], dict[str, Any]] | None) -> PathResult:
    """Build the artifact, run it on every variant, and time it with ``latency`` (None: not timed)."""
    result = PathResult(name)
    start = time.perf_counter()
    log = C.WarningLog()
    try:
        with log, C.quiet():
            run = build(result)
    except Exception as exc:
        result.status, result.error = FAILED, exc
        result.reason = failure_reason(name, exc)
        result.warnings = log.caught
        result.seconds = time.perf_counter() - start
        return result
    result.warnings = log.caught
    result.runner = run
    with C.WarningLog():
        run_variants(result, run, eager)
        if latency is not None:
            result.latency_ms = latency(run)
    settle(result)
    result.seconds = time.perf_counter() - start
    return result


def run_more(result: PathResult, variants: list[Variant], eager: Eager) -> None:
    """Run a built artifact on ``variants`` too (probes chosen after every path was built)."""
    if result.runner is None:
        return
    start = time.perf_counter()
    done = {v.name for v in result.variants}
    with C.WarningLog():
        run_variants(result, result.runner, eager, [v for v in variants if v.name not in done])
    settle(result)
    result.seconds += time.perf_counter() - start


def settle(result: PathResult) -> None:
    """The path's status and reason from its variants."""
    broken = result.broken()
    if broken:
        result.status = MISMATCH
        first = broken[0]
        what = "raises" if first.status == "error" else "differs from eager"
        result.reason = (f"{what} on {', '.join(v.name for v in broken)}: {first.problem}")
    else:
        result.status = OK
        result.reason = f"matches eager on {len(result.variants)} input variants"


def failure_reason(name: str, exc: BaseException) -> str:
    text = str(exc)
    m = re.search(r"Found <class '([^']+)'> in output, which is not a known type", text)
    if m:
        return f"the output holds a {m.group(1).rsplit('.', 1)[-1]} object, which torch.export cannot carry"
    m = re.search(r"Tracer cannot infer type of (\w+)", text)
    if m:
        return f"the output ({m.group(1)}) holds an object the tracer cannot carry"
    if "can be output from traced functions" in text:
        return "the output holds an object the tracer cannot carry (only tensors, lists, tuples and dicts of tensors)"
    if "Could not guard on data-dependent expression" in text:
        return "forward branches on a tensor value, which torch.export cannot decide at export time"
    m = re.search(r"Failed to get source for <function ([\w.<>]+)", text)
    if m:
        return (f"torch.jit.script needs the source of every function the model calls, and the source of "
                f"{m.group(1)} is not available")
    if "could not get source code" in text:
        return "torch.jit.script needs the source of every function the model calls, and some is not available"
    cause = exc.__cause__
    if name == "onnx" and cause is not None and type(exc).__name__ == "TorchExportError":
        return "torch.export (step 1 of the ONNX export) failed: " + failure_reason("export", cause)
    if name == "onnx" and cause is not None and type(exc).__name__ == "ConversionError":
        while cause.__cause__ is not None:
            cause = cause.__cause__  # the root: usually "No ONNX function found for <OpOverload ...>"
        return "the exported program could not be translated to ONNX: " + C.first_line(cause, 240)
    return C.first_line(exc, 240)
