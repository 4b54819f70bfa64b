"""`torchpact run --profile`: torch.profiler over a few steps after warm-up, and where step time goes.

Off by default (``--profile`` or ``--watchers profile`` turn it on). After ``warmup`` optimizer steps
it starts ``torch.profiler`` (CPU, plus CUDA when the script uses it) for ``steps`` steps, marking
each step's end and the root module's forward with ranges of its own; then it stops the profiler,
exports the trace (Chrome trace JSON: Perfetto and TensorBoard read it) and hands the events to
:mod:`torchpact.watch.profiling`, which cuts every step into data loading, forward, backward,
optimizer, communication, host-device syncs and idle time. The watcher keeps the result as plain
data (``data()["profile"]``) and reports:

- TP911: the loop waits on the DataLoader for a large share of each step;
- TP912: many host-device syncs (scalar reads) per step;
- TP913: steps made of many tiny operators / kernels, so per-op overhead dominates.

The profiled steps are exempt from the other watchers' sampled checks (the session's sampler says
"not sampled" for them), so the expensive checks do not inflate the timings; the cheap per-module
hooks still run, and the profiler itself adds a few microseconds per op.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator
from typing import Any, NamedTuple

from torchpact.findings import Category, Evidence, Severity
from torchpact.median import median
from torchpact.watch import profiling as P
from torchpact.watch.watcher import Check, Watcher

DATA_SHARE = 0.3        # TP911: DataLoader wait at or above this share of the median step
DATA_MIN_S = 0.002      # ... and at least this long (a 50 µs step waiting 20 µs is not data-bound)
SYNCS_PER_STEP = 10     # TP912: host-device syncs (scalar reads) per step
OPS_PER_STEP = 300      # TP913 on CPU: top-level operators per step, median under 20 µs ...
OP_SHARE = 0.5          # ... that together fill less than this share of the training (non-loader) time
KERNELS_PER_STEP = 200  # TP913 on GPU: kernels per step, median under 10 µs, device idle half the step
TOP_OPS = 12

_RUNTIME = "\n\n(Found by `torchpact run --profile`, from torch.profiler events of a few steps after warm-up.)"

DATA_BOUND = Check(
    code="TP911", category=Category.PERFORMANCE, severity=Severity.WARNING, evidence=Evidence.INFERRED,
    summary="The training loop waits on the DataLoader for a large share of every step.",
    doc="""## What it does
Profiles a few steps after warm-up and measures, inside each step, the time spent in the
DataLoader's `__next__` (torch records it as `enumerate(DataLoader)#...`). It reports when that wait
is 30% or more of the median step (and at least 2 ms), naming whether the batches are loaded in the
training process (`num_workers=0`) or by worker processes that do not keep up.

## Why is this bad?
With `num_workers=0` torch 2.13 runs `Dataset.__getitem__`, the transforms and `collate_fn` in the
training process, between two steps: the model (and the GPU) waits for every batch. With workers the
batches are prepared in parallel, `prefetch_factor` batches ahead per worker; a remaining wait means
the workers together are slower than the model. Either way the accelerator is idle for that share
of the step, however "busy" `nvidia-smi` says it is.

## How to fix
`DataLoader(..., num_workers=N, pin_memory=True, persistent_workers=True)` with N up to the CPU cores
available per GPU; move heavy transforms to the GPU (batched) or precompute them; decode smaller
images; check `prefetch_factor`.""" + _RUNTIME)

HOST_SYNCS = Check(
    code="TP912", category=Category.PERFORMANCE, severity=Severity.WARNING, evidence=Evidence.INFERRED,
    severity_note="`info` on CPU, where reading a tensor's value is cheap but each read becomes a host-device sync "
                  "on a GPU",
    summary="Many host-device syncs per step: the host waits for the device again and again.",
    doc="""## What it does
Counts, in each profiled step, the points where the host waits for the device: on CUDA the
runtime's synchronising calls (`cudaStreamSynchronize`, `cudaDeviceSynchronize`, blocking `cudaMemcpy`);
on CPU the scalar reads that would be such syncs on a GPU (`aten::_local_scalar_dense`, called by
`.item()`, `float(t)`, `int(t)` and `bool(t)` — an `if` on a tensor). It reports 10 or more per step,
with what called them; as a warning on CUDA, and as info on CPU, where a read is cheap.

## Why is this bad?
CUDA runs kernels asynchronously: the Python loop normally queues work ahead while the GPU computes.
Each sync makes the host wait until the GPU has drained its queue, then the GPU waits while Python
queues the next kernels. Ten syncs per step split the step into ten stop-and-go phases; the GPU's
"utilisation" stays high while much of the step is launch latency.

## How to fix
Keep values on the device (`running += loss.detach()`), read them only when logging
(`if step % 100 == 0:`), replace Python `if`s on tensors by `torch.where`, avoid `.tolist()` and
`.nonzero()` in the loop; `torch.cuda.set_sync_debug_mode("warn")` names each sync's line.""" + _RUNTIME)

TINY_KERNELS = Check(
    code="TP913", category=Category.PERFORMANCE, severity=Severity.INFO, evidence=Evidence.INFERRED,
    severity_note="`warning` on a GPU busy for at most half the step: kernel launch overhead sets the step time",
    summary="Steps are made of many tiny operators or kernels: per-call overhead dominates the step.",
    doc="""## What it does
Counts, in each profiled step, the operators the host dispatches (top-level `aten::` calls) and, on
a GPU, the kernels that run. On CPU it reports 300 or more operators per step with a median call under
20 µs that together fill less than half of the step's training time (the rest being Python and
dispatch between them); on a GPU, 200 or more kernels per step with a median under 10 µs while the
device is idle for half of the step or more.

## Why is this bad?
Every operator costs a few microseconds of Python and dispatcher work on the host, and every CUDA
kernel a few more to launch, whatever the size of the tensors. When each call does only a few
microseconds of work — a Python loop over samples, layers or parameters, many small tensors instead
of one batched one, an unfused optimizer — the step is overhead: the device idles between kernels.

## How to fix
Batch the work (vectorise loops over samples or heads; stack small tensors), use the foreach or
fused optimizer implementations (`torch.optim.AdamW(..., fused=True)` on CUDA), larger batches,
`torch.compile` to fuse elementwise chains, or CUDA graphs (`mode="reduce-overhead"`).""" + _RUNTIME)


class StepProfile(Watcher):
    """torch.profiler over ``steps`` optimizer steps after ``warmup``; attribution, top operators, findings."""

    name = "profile"
    unsampled_calls = "roots"
    checks = (DATA_BOUND, HOST_SYNCS, TINY_KERNELS)
    enabled_by_default = False

    def __init__(self, warmup: int = 3, steps: int = 5, trace_dir: str | None = "torchpact-profile") -> None:
        super().__init__()
        self.warmup, self.steps, self.trace_dir = max(0, warmup), max(1, steps), trace_dir
        self.result: dict[str, Any] = {}
        self._prof: Any = None
        self._done = False
        self._marks = 0
        self._forward: Any = None
        self._device = False

    def attach(self, session: Any) -> None:
        super().attach(session)
        window = range(self.warmup, self.warmup + self.steps)
        sampler = session.sampler
        session.sampler = lambda step: step not in window and sampler(step)
        session.sampled = session.sampler(session.step)

    # ------------------------------------------------------------------ recording
    def on_forward_pre(self, module: Any, args: tuple) -> None:
        if self._done:
            return
        if self._prof is None and self.warmup == 0 and self.session.depth == 1:
            self._start()
        if self._prof is not None and self.session.depth == 1 and self._forward is None:
            from torch.autograd.profiler import record_function

            self._forward = record_function(P.FORWARD_RANGE)
            self._forward.__enter__()

    def on_forward(self, module: Any, args: tuple, output: Any) -> None:
        if self._forward is not None and self.session.depth == 0:
            rf, self._forward = self._forward, None
            rf.__exit__(None, None, None)

    def on_step_end(self, step: int) -> None:
        if self._done:
            return
        if self._prof is None:
            if step + 1 == self.warmup:
                self._start()
            return
        self._mark(step)
        if self._marks > self.steps:
            self._finish()

    def on_close(self) -> None:
        if self._prof is not None and not self._done:
            self._finish()
        elif not self._done:
            self.result = {"status": "too short",
                           "reason": f"the script made {self.session.step} optimizer steps; profiling starts after "
                                     f"{self.warmup} (--profile-warmup)"}

    def _start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile

        self._device = torch.cuda.is_available() and torch.cuda.is_initialized()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self._device else [])
        self._prof = profile(activities=activities, record_shapes=False, with_stack=False)
        with _native_stderr_silenced():
            self._prof.start()
        self._mark(self.session.step - 1)

    def _mark(self, step: int) -> None:
        from torch.autograd.profiler import record_function

        with record_function(f"{P.STEP_MARKER}{step}"):
            pass
        self._marks += 1

    def _finish(self) -> None:
        self._done = True
        prof, self._prof = self._prof, None
        if self._forward is not None:  # the script ended inside a forward
            self._forward.__exit__(None, None, None)
            self._forward = None
        with _native_stderr_silenced():
            prof.stop()
        events = _events(prof)
        result = P.analyse(events, has_device=self._device)
        steps = result["steps"]
        for i, s in enumerate(steps):
            s["step"] = self.warmup + i
        result.update(status="ok" if steps else "too short", phases=list(P.PHASES), device=self._device,
                      top_ops=_top_ops(prof, self._device), data_loader=_loader_kind(events))
        if not steps:
            result["reason"] = "no complete step was profiled"
        result["note"] = (f"{len(steps)} steps after {self.warmup} warm-up steps; host time of the training thread, "
                          "cut by the most specific phase; idle: Python between phases")
        if self.trace_dir:
            try:
                os.makedirs(self.trace_dir, exist_ok=True)
                rank = "" if self.session.rank is None else f"_rank{self.session.rank}"
                path = os.path.join(self.trace_dir, f"{socket.gethostname()}_{os.getpid()}{rank}.pt.trace.json")
                prof.export_chrome_trace(path)
                result["trace"] = path
            except OSError as exc:
                result["trace_error"] = str(exc)
        self.result = result
        if steps:
            self._judge(result)

    # ------------------------------------------------------------------ findings
    def _judge(self, result: dict[str, Any]) -> None:
        for verdict in judge(result, device=self._device):
            self.session.report(verdict.check, verdict.message, fix=verdict.fix, key=verdict.key,
                                severity=verdict.severity, **(verdict.extra or {}))

    def data(self) -> dict[str, Any]:
        return dict(self.result)


class Verdict(NamedTuple):
    """One finding the recorded numbers call for (plain data; the watcher reports it)."""

    check: Check
    message: str
    fix: str
    key: str
    severity: Severity | None = None
    extra: dict[str, Any] | None = None


def judge(result: dict[str, Any], *, device: bool) -> list[Verdict]:
    """The findings of a profile, a pure function of its recorded numbers (``profiling.analyse``'s result).

    Kept apart from the recording so the decision can be tested on recorded or synthetic timings:
    real timings depend on the machine's load.
    """
    steps = result.get("steps") or []
    if not steps:
        return []
    medians = result.get("median") or {}
    step_s = median(s["seconds"] for s in steps)
    if step_s <= 0:
        return []
    out = []
    wait = medians.get("dataloader", 0.0)
    if wait >= DATA_SHARE * step_s and wait >= DATA_MIN_S:
        kind = result.get("data_loader")
        if kind == "single-process":
            why = ("the DataLoader loads in the training process (num_workers=0): __getitem__, the transforms "
                   "and collate run between steps while the model waits")
            fix = ("DataLoader(..., num_workers=N, pin_memory=True, persistent_workers=True); move heavy "
                   "transforms to the GPU or precompute them")
        else:
            why = "the DataLoader's worker processes do not produce batches as fast as the model consumes them"
            fix = "more workers (num_workers), a larger prefetch_factor, lighter or precomputed transforms"
        out.append(Verdict(
            DATA_BOUND, f"the loop waits on the DataLoader for {wait / step_s:.0%} of each step "
            f"({_ms(wait)} of {_ms(step_s)}, median of {len(steps)} profiled steps): {why}",
            fix, "data", extra={"share": round(wait / step_s, 3), "data_loader": kind}))
    syncs = P.median_of(steps, "syncs")
    if syncs >= SYNCS_PER_STEP:
        sources: dict[str, int] = {}
        for s in steps:
            for k, v in (s.get("sync_sources") or {}).items():
                sources[k] = sources.get(k, 0) + v
        what = ", ".join(f"{k} ×{round(v / len(steps))}" for k, v in sorted(sources.items(), key=lambda kv: -kv[1])
                         if round(v / len(steps)))
        share = medians.get("sync", 0.0) / step_s
        if device:
            message = (f"{syncs:.0f} host-device syncs per step (median of {len(steps)} profiled steps"
                       + (f"; scalar reads: {what}" if what else "") + f"), {share:.0%} of the step spent "
                       "waiting: each one stops the host until the GPU has drained its queue")
            severity = Severity.WARNING
        else:
            message = (f"{syncs:.0f} tensor values are read back to Python per step ({what or 'scalar reads'}; "
                       f"median of {len(steps)} profiled steps): cheap on CPU, but once the model runs on a GPU "
                       "each read is a host-device sync that stalls the queue")
            severity = Severity.INFO
        out.append(Verdict(
            HOST_SYNCS, message, "keep values on the device (`running += loss.detach()`), read them only when "
            "logging, and replace `if` on tensors by torch.where; torch.cuda.set_sync_debug_mode('warn') names "
            "each line", "syncs", severity=severity, extra={"syncs_per_step": syncs}))
    tiny = _granularity(steps, step_s, device)
    if tiny is not None:
        out.append(tiny)
    return out


def _granularity(steps: list[dict[str, Any]], step_s: float, device: bool) -> Verdict | None:
    if device:
        kernels = P.median_of(steps, "kernels")
        kmed = P.median_of(steps, "kernel_median_us")
        busy = P.median_of(steps, "device_busy_seconds")
        if kernels >= KERNELS_PER_STEP and 0 < kmed < P.TINY_KERNEL_US and busy <= 0.5 * step_s:
            return Verdict(
                TINY_KERNELS, f"each step launches {kernels:.0f} GPU kernels with a median of {kmed:.1f} µs, and "
                f"the GPU is busy for only {busy / step_s:.0%} of the step: launch overhead, not compute, sets "
                "the step time", _TINY_FIX, "tiny", severity=Severity.WARNING,
                extra={"kernels_per_step": kernels, "kernel_median_us": kmed})
        return None
    ops = P.median_of(steps, "ops")
    omed = P.median_of(steps, "op_median_us")
    shares = [s["op_seconds"] / s["compute_seconds"] for s in steps if s["compute_seconds"] > 0]
    share = median(shares) if shares else 1.0
    if ops >= OPS_PER_STEP and 0 < omed < P.TINY_US and share < OP_SHARE:
        return Verdict(
            TINY_KERNELS, f"each step dispatches {ops:.0f} operators with a median of {omed:.1f} µs, and the "
            f"operators themselves fill only {share:.0%} of the step's training time: the rest is per-call "
            "overhead (Python, dispatch), which sets the step time", _TINY_FIX, "tiny",
            extra={"ops_per_step": ops, "op_median_us": omed, "op_share": round(share, 3)})
    return None


_TINY_FIX = ("batch the work (vectorise Python loops over samples, heads or parameters; stack small tensors), use "
             "foreach/fused optimizers, larger batches, or torch.compile / CUDA graphs to fuse the small calls")


@contextlib.contextmanager
def _native_stderr_silenced() -> Iterator[None]:
    """Kineto (torch 2.13) prints ``USDT: ... profiler_start`` / ``profiler_stop`` on the process's fd 2
    from C++, whatever KINETO_LOG_LEVEL says: not for the user's screen."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no usable fd 2 (a closed or replaced stderr): nothing to hide
        yield
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def _events(prof: Any) -> list[P.Event]:
    from torch.autograd import DeviceType

    out = []
    for ev in prof.events():
        device = ev.device_type != DeviceType.CPU
        parents = []
        p = ev.cpu_parent
        while p is not None and len(parents) < 64:
            parents.append(p.name)
            p = p.cpu_parent
        top = not device and ev.name.startswith("aten::") and not any(n.startswith("aten::") for n in parents)
        out.append(P.Event(ev.name, float(ev.time_range.start), float(ev.time_range.end), int(ev.thread or 0),
                           device, top, tuple(parents)))
    return out


def _loader_kind(events: list[P.Event]) -> str | None:
    for ev in events:
        if ev.name.startswith("enumerate(DataLoader)"):
            return "single-process" if "_SingleProcess" in ev.name else "worker processes"
    return None


def _top_ops(prof: Any, device: bool) -> list[dict[str, Any]]:
    rows = []
    for avg in prof.key_averages():
        if avg.key.startswith(("torchpact.", "ProfilerStep", "enumerate(DataLoader)", "Optimizer.")):
            continue
        row = {"name": avg.key, "calls": int(avg.count), "self_ms": round(avg.self_cpu_time_total / 1000, 4),
               "total_ms": round(avg.cpu_time_total / 1000, 4)}
        if device:
            row["device_ms"] = round(getattr(avg, "self_device_time_total", 0.0) / 1000, 4)
        rows.append(row)
    key = "device_ms" if device else "self_ms"
    rows.sort(key=lambda r: -r[key])
    return rows[:TOP_OPS]
