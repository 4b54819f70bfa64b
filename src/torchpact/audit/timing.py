"""Latency, measured one way for export-check and compile-check: p50 / p99 in repeats, and why not to
trust them when the machine decided them.

Eager is timed by :func:`eager_latency` only, by both commands, first thing after eager's reference
outputs and before any trace, export or dynamo work (``torch._dynamo.explain`` and ``reset`` have
left eager several times slower), in eval mode under ``no_grad``, with the command's thread count,
on the same inputs (:func:`latency_inputs`). export-check's artifacts are timed with :func:`timed`
afterwards; :func:`drift` says when eager, timed again next to an artifact, no longer runs at its
clean-state speed, so that the two cannot be compared. compile-check ranks its modes on eager timed
in the same rounds as each mode instead (:mod:`torchpact.audit.paired`).
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any, Callable, Iterator

from torchpact.audit import _common as C
from torchpact.audit.variants import Dims, Variant
from torchpact.median import median as _median

REPEATS = 3
BUDGET_S = 0.5  # seconds of timing per input, spread over the repeats

# A p50 is a number to act on only when the tail and the repeats agree with it: past these bounds the
# machine's load, not the model, decides which measurement is faster.
MAX_TAIL = 3.0  # p99 / p50
MAX_SPREAD = 0.25  # (max - min) / median of the repeats' p50s; also eager's drift from its clean p50


def time_calls(fn: Callable[[], Any], budget_s: float = 0.25, max_calls: int = 50,
               min_calls: int = 3, warmup: int = 1) -> list[float]:
    """Wall times (ms) of ``fn()`` after ``warmup`` calls, within about ``budget_s`` seconds."""
    for _ in range(warmup):
        fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_calls and (len(times) < min_calls or time.perf_counter() - start < budget_s):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return times


def sync(device: str) -> None:
    """Wait for the device (CUDA runs asynchronously; a wall time without it measures the launch)."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def timed(fns: dict[str, Callable[[], Any]], device: str = "cpu",
          budget_s: float = BUDGET_S) -> dict[str, dict[str, Any]]:
    """p50/p99 per label over ``REPEATS`` repeats of about ``budget_s / REPEATS`` each, after a warm-up.

    The repeats go round the labels, so that a stretch of machine load lands in one repeat of each
    (and shows as spread) rather than in every call of one label. A label whose call raises gets
    ``error`` and no figures.
    """
    repeats: dict[str, list[list[float]]] = {label: [] for label in fns}
    errors: dict[str, str] = {}
    for i in range(REPEATS):
        for label, fn in fns.items():
            if label in errors:
                continue

            def call(fn: Callable[[], Any] = fn) -> None:
                fn()
                sync(device)

            try:
                # the first calls after a pause wake torch's thread pool (tens of ms on a busy machine)
                repeats[label].append(time_calls(call, budget_s=budget_s / REPEATS, max_calls=200, min_calls=10,
                                                 warmup=5 if i == 0 else 1))
            except Exception as exc:
                errors[label] = C.first_line(exc, 160)
    return {label: ({"p50": None, "p99": None, "error": errors[label]} if label in errors
                    else latency_stats(repeats[label])) for label in fns}


def latency_inputs(variants: list[Variant], dims: Dims) -> dict[str, Variant]:
    """example, the smallest batch and the largest batch (when the model has a batch dimension)."""
    out = {"example": variants[0]}
    if "batch" in dims.dims:
        batches = [v for v in variants if v.name.startswith("batch=")]
        if batches:
            sizes = {v.name: int(v.name.split("=")[1]) for v in batches}
            smallest = min(batches, key=lambda v: sizes[v.name])
            largest = max(batches, key=lambda v: sizes[v.name])
            if sizes[smallest.name] < dims.dims["batch"][0]:
                out[smallest.name] = smallest
            if sizes[largest.name] > dims.dims["batch"][0]:
                out[largest.name] = largest
    return out


@contextlib.contextmanager
def eval_mode(model: Any) -> Iterator[None]:
    """The model in eval mode for the block, each module's own mode restored afterwards."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


def eager_latency(model: Any, variants: list[Variant], dims: Dims, device: str = "cpu",
                  budget_s: float = BUDGET_S) -> dict[str, dict[str, Any]]:
    """Eager's p50/p99 per input of :func:`latency_inputs`, in eval mode under ``no_grad``.

    Call it before any trace, export or dynamo work, inside the command's thread setting: both
    commands do, so their eager figures are one measurement taken twice.
    """
    import torch

    inputs = latency_inputs(variants, dims)
    with eval_mode(model), torch.no_grad(), C.quiet():
        return timed({label: (lambda v=v: model(*v.args, **v.kwargs)) for label, v in inputs.items()},
                     device, budget_s)


def drift(clean: dict[str, Any], now: dict[str, Any], max_drift: float = MAX_SPREAD) -> str | None:
    """Why eager timed ``now`` (next to an artifact) cannot stand for eager timed ``clean``, or None."""
    a, b = clean.get("p50"), now.get("p50")
    if not a or not b:
        return None
    if abs(b - a) / a > max_drift:
        return (f"eager ran at {b:.3g} ms p50 next to the artifact vs {a:.3g} ms first (the machine's load, or "
                "state the export left)")
    return None


def instability(repeats: list[list[float]], max_tail: float = MAX_TAIL, max_spread: float = MAX_SPREAD) -> str | None:
    """Why timings taken in ``repeats`` (lists of ms) are too unstable to rank, or None when they are not."""
    times = [t for r in repeats for t in r]
    if not times:
        return "nothing was measured"
    p50, p99 = percentile(times, 0.5), percentile(times, 0.99)
    reasons = []
    if p50 > 0 and p99 / p50 > max_tail:
        reasons.append(f"p99 is {p99 / p50:.1f}x p50")
    medians = [median(r) for r in repeats if r]
    if len(medians) > 1 and median(medians) > 0:
        spread = (max(medians) - min(medians)) / median(medians)
        if spread > max_spread:
            reasons.append(f"the p50s of {len(medians)} repeats spread {spread:.0%}")
    return "; ".join(reasons) or None


def latency_stats(repeats: list[list[float]]) -> dict[str, Any]:
    """p50 / p99 (ms) over all repeats, the number of calls, and why they are unstable when they are."""
    times = [t for r in repeats for t in r]
    out: dict[str, Any] = {"p50": C.rounded(percentile(times, 0.5), 3), "p99": C.rounded(percentile(times, 0.99), 3),
                           "calls": len(times), "repeats": len(repeats)}
    why = instability(repeats)
    if why:
        out["unstable"] = why
    return out


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def median(values: list[float]) -> float:
    return _median(values) if values else math.nan
