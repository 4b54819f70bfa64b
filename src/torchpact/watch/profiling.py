"""Where a training step's time goes, computed from torch.profiler events (plain data in, plain data out).

The profile watcher (``watchers/step_profile.py``) records a few steps with ``torch.profiler`` and
hands the events here as :class:`Event` tuples. Each step — from one optimizer step's end to the
next — is cut into phases by the events that cover each instant of the training thread's time,
the most specific phase winning where they overlap (an ``.item()`` inside the forward is sync time,
not forward time):

``sync`` > ``communication`` > ``dataloader`` > ``optimizer`` > ``backward`` > ``forward``;
what no event covers is ``idle`` (Python between the phases: logging, metrics, the loop itself).

- dataloader: ``enumerate(DataLoader)#...__next__`` — the time the loop waits for the next batch;
- forward: the root module's forward (a range the watcher records around it);
- backward: ``autograd::engine::evaluate_function: ...`` on any thread;
- optimizer: ``Optimizer.step#...`` and ``Optimizer.zero_grad#...``;
- communication: c10d / NCCL / gloo collectives and their waits;
- sync: the host waiting for the device (``cuda*Synchronize``, blocking ``cudaMemcpy``), and on CPU
  ``aten::_local_scalar_dense`` — what ``.item()``, ``float(t)`` and ``if t:`` call, each a
  host-device sync once the tensor lives on a GPU; not inside the DataLoader, whose dataset and
  collate read CPU tensors that never live on a GPU (that time is the DataLoader's).
"""

from __future__ import annotations

import re
from itertools import pairwise
from typing import Any, Iterable, NamedTuple

from torchpact.median import median

PHASES = ("dataloader", "forward", "backward", "optimizer", "communication", "sync", "idle")
PRIORITY = ("sync", "communication", "dataloader", "optimizer", "backward", "forward")
STEP_MARKER = "torchpact.step_end#"
FORWARD_RANGE = "torchpact.forward"
TINY_US = 20.0            # a host op shorter than this is mostly dispatch overhead
TINY_KERNEL_US = 10.0     # a GPU kernel shorter than this costs about as much to launch as to run

_COMM = re.compile(r"nccl|gloo|c10d::|record_param_comms|allreduce|all_reduce|allgather|all_gather|"
                   r"reduce_scatter|broadcast_|alltoall|barrier", re.I)
_DEVICE_SYNC = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
                "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize", "hipMemcpy")
SCALAR_READ = "aten::_local_scalar_dense"


class Event(NamedTuple):
    """One profiler event, reduced to what the analysis needs. Times in microseconds."""

    name: str
    start: float
    end: float
    thread: int = 0
    device: bool = False         # a kernel / memcpy on the device (not a host range)
    top_op: bool = False         # an aten op not nested in another aten op (host side)
    parents: tuple[str, ...] = ()  # the names of the enclosing host events, innermost first


def phase_of(name: str) -> str | None:
    if name.startswith("enumerate(DataLoader)"):
        return "dataloader"
    if name == FORWARD_RANGE:
        return "forward"
    if name.startswith("autograd::engine::evaluate_function"):
        return "backward"
    if name.startswith(("Optimizer.step#", "Optimizer.zero_grad#")):
        return "optimizer"
    if name in _DEVICE_SYNC or name == SCALAR_READ:
        return "sync"
    if _COMM.search(name):
        return "communication"
    return None


def step_bounds(events: Iterable[Event]) -> list[tuple[float, float]]:
    """The profiled steps, from one step-end marker to the next (the first is set when profiling starts)."""
    marks = sorted(ev.start for ev in events if ev.name.startswith(STEP_MARKER))
    return [(a, b) for a, b in pairwise(marks) if b > a]


def attribute(events: list[Event], lo: float, hi: float) -> dict[str, float]:
    """Seconds of [lo, hi] (µs) per phase; disjoint, summing to the step's length."""
    edges: list[tuple[float, int, str]] = []
    for ev in events:
        if ev.device:
            continue
        phase = phase_of(ev.name)
        if phase is None:
            continue
        if phase == "sync" and _in_loader(ev):
            phase = "dataloader"
        s, t = max(ev.start, lo), min(ev.end, hi)
        if t > s:
            edges.append((s, 1, phase))
            edges.append((t, -1, phase))
    edges.sort(key=lambda x: (x[0], x[1]))
    active = {p: 0 for p in PRIORITY}
    spent = {p: 0.0 for p in PHASES}
    at = lo
    for time, delta, phase in edges:
        if time > at:
            now = next((p for p in PRIORITY if active[p] > 0), "idle")
            spent[now] += time - at
            at = time
        active[phase] += delta
    if hi > at:
        spent[next((p for p in PRIORITY if active[p] > 0), "idle")] += hi - at
    return {p: round(v / 1e6, 9) for p, v in spent.items()}


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, t in sorted(intervals):
        if t <= end:
            continue
        total += t - max(s, end)
        end = t
    return total


def analyse(events: list[Event], *, has_device: bool) -> dict[str, Any]:
    """Per-step phases, their median, sync counts and op/kernel granularity for the profiled steps."""
    bounds = step_bounds(events)
    steps = []
    for lo, hi in bounds:
        inside = [ev for ev in events if ev.end > lo and ev.start < hi]
        phases = attribute(inside, lo, hi)
        host_syncs = [ev for ev in inside if not ev.device and ev.start >= lo and ev.name in _DEVICE_SYNC]
        reads = [ev for ev in inside if not ev.device and ev.start >= lo and ev.name == SCALAR_READ
                 and not _in_loader(ev)]
        ops = [ev for ev in inside if ev.top_op and ev.start >= lo and ev.name.startswith("aten::")
               and not _in_loader(ev)]
        kernels = [ev for ev in inside if ev.device and ev.start >= lo and not ev.name.startswith(("Memcpy", "Memset"))]
        compute = phases["forward"] + phases["backward"] + phases["optimizer"] + phases["idle"]
        info: dict[str, Any] = {
            "seconds": round((hi - lo) / 1e6, 9),
            "phases": phases,
            "syncs": len(host_syncs) if has_device else len(reads),
            "scalar_reads": len(reads),
            "sync_sources": _sync_sources(reads),
            "ops": len(ops),
            "op_median_us": round(median(ev.end - ev.start for ev in ops), 3) if ops else None,
            "op_seconds": round(sum(ev.end - ev.start for ev in ops) / 1e6, 9),
            "compute_seconds": round(compute, 9),
        }
        if has_device:
            durations = [ev.end - ev.start for ev in kernels]
            info.update({
                "kernels": len(kernels),
                "kernel_median_us": round(median(durations), 3) if durations else None,
                "tiny_kernels": sum(1 for d in durations if d < TINY_KERNEL_US),
                "device_busy_seconds": round(_union([(ev.start, ev.end) for ev in kernels]) / 1e6, 9),
            })
        steps.append(info)
    return {"steps": steps, "median": _median_phases(steps)}


def _in_loader(ev: Event) -> bool:
    """Whether ``ev`` ran inside the DataLoader's ``__next__``: the dataset's and collate's own work on
    CPU tensors (an ``.item()`` there reads host memory and never waits for a device)."""
    return any(p.startswith("enumerate(DataLoader)") for p in ev.parents)


def _sync_sources(reads: list[Event]) -> dict[str, int]:
    """What called each scalar read: ``.item()`` (and float()/int()), ``bool(t)`` (an ``if`` on a tensor)..."""
    out: dict[str, int] = {}
    for ev in reads:
        callers = [p for p in ev.parents if p.startswith("aten::")]
        if "aten::is_nonzero" in callers:
            key = "bool(tensor)"
        elif callers and callers[0] == "aten::item" and len(callers) == 1:
            key = ".item()"
        elif callers:
            key = callers[-1]
        else:
            key = "other"
        out[key] = out.get(key, 0) + 1
    return out


def _median_phases(steps: list[dict[str, Any]]) -> dict[str, float]:
    if not steps:
        return {}
    return {p: round(median(s["phases"][p] for s in steps), 9) for p in PHASES}


def median_of(steps: list[dict[str, Any]], key: str) -> float:
    values = [s[key] for s in steps if s.get(key) is not None]
    return float(median(values)) if values else 0.0
