"""Autograd graphs kept alive across training steps, and memory that grows step over step.

Graphs (TP101, TP102): on sampled steps the first graph-attached output of a module, and the outputs
of the root modules the script calls (the model, the loss module), get a tiny sentinel object in their
``grad_fn.metadata`` dict. The sentinel lives exactly as long as that autograd node: a node of step k
that is still alive at step k+2 means something holds that step's graph. Nothing is added to the
graph and no hook runs in backward. When graphs of ``HELD_STEPS`` earlier steps are held at once (and
the oldest is ``HELD_AGE`` steps old, so a one-step cache or a bounded window does not count), the
holder is looked for — only then — in the local and global variables of the script's frames on the
stack (and one level of attributes of the objects found there and of the models' modules: ``_memory_holders``):
a tensor whose graph reaches marked nodes of several steps is an accumulator (TP101), a list / dict / tuple /
deque holding such tensors is a container (TP102).

Growth (TP151): at the end of sampled steps after ``WARMUP`` steps, the process's anonymous resident memory
(``/proc/self/statm`` resident minus file-backed, one ``pread`` of a few µs) and, where CUDA is initialised,
the allocated bytes of each device in use (``torch.cuda.memory_stats``: host-side counters, no sync) are
recorded. Allocated CUDA memory at a step's end is flat in a healthy loop, so a steady rise is a leak.
Resident memory is noisier (allocator caches, Python objects), so a rise there is only reported when the
Python-visible tensors explain it: a variable of the script whose tensors hold most of the growth, or two
scans of ``gc.get_objects()`` (about 0.1 s each, done at most twice, and only once a rise was seen) ten or
more steps apart, or a graph leak found above.

Cached CUDA memory (TP152, info): on sampled steps, ``torch.cuda.memory_stats()``; reported once when
the caching allocator reserves far more than the tensors ever used at their peak.

Cost on unsampled steps: one attribute test per module call. On sampled steps: a dict entry per
marked node, a walk over a short list of weak references, and two counters read.
"""

from __future__ import annotations

import gc
import weakref
from collections import deque
from itertools import pairwise
from typing import Any, Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers._memory_holders import (CONTAINERS, Holder, all_tensor_bytes, find_holders, flat_tensors,
                                                      holder_bytes, reached_steps, script_frames, write_line)
from torchpact.watch.watchers._rss import Rss

HELD_STEPS = 4          # graphs of this many distinct earlier steps alive at once ...
HELD_AGE = 6            # ... the oldest created at least this many steps ago
MARKS_PER_STEP = 6
BOUNDED_WINDOW = 64     # a deque(maxlen=...) up to this long is a window, not a leak
WARMUP = 5              # optimizer state and allocator caches settle in the first steps
MIN_SPAN = 20           # steps a growth must span
CPU_MIN_GROWTH = 64 << 20
CUDA_MIN_GROWTH = 16 << 20
GAP_MIN = 1 << 30
_KEY = "torchpact.memory"

GRAPH_ACCUMULATED = Check(
    code="TP101",
    category=Category.MEMORY,
    severity=Severity.ERROR,
    summary="A graph-attached tensor is accumulated across iterations, so every step's graph stays alive.",
    doc="""## What it does
Marks, on sampled steps, the autograd nodes of the model's outputs (a sentinel in `grad_fn.metadata`,
which lives exactly as long as the node) and notices when nodes of several earlier steps are still
alive. It then looks through the training loop's variables for the tensor whose graph reaches them:
a running total such as `total += loss`, or a hidden state carried from step to step without
`.detach()`. The finding names the variable and the line that accumulates it.

## Why is this bad?
`total += loss` makes `total` a new tensor whose `grad_fn` (`AddBackward0`) points to the previous
total and to this step's loss: after N steps, `total.grad_fn` reaches N forward graphs. On torch 2.13
`backward()` releases the tensors a graph saved, but not the graph's nodes, which stay as long as
`total` refers to them — and a graph that was not back-propagated yet keeps all its saved activations
too. Memory grows every step until the process runs out, and a `total.backward()` (or a hidden state
back-propagated through every earlier step) gets slower every step.

## How to fix
Accumulate a value without a graph: `total += loss.detach()` or `total += loss.item()`. For a
recurrent state carried across steps (truncated BPTT), `hidden = hidden.detach()` at the start of
each step.""",
)

GRAPH_IN_CONTAINER = Check(
    code="TP102",
    category=Category.MEMORY,
    severity=Severity.ERROR,
    severity_note="`warning` when the graphs of earlier steps stay alive but no variable of the training loop is "
                  "found holding them",
    summary="Graph-attached outputs are kept in a container across iterations, so every step's graph stays alive.",
    doc="""## What it does
Marks, on sampled steps, the autograd nodes of the model's outputs (a sentinel in `grad_fn.metadata`,
which lives exactly as long as the node) and notices when nodes of several earlier steps are still
alive. It then looks through the training loop's variables — and the attributes of the objects and
modules they hold — for the list, dict, tuple or deque whose tensors reach them (`losses.append(loss)`,
`outputs.append(model(x))`, `self.history.append(out)`), and names it with the line that fills it.
When graphs are held but no variable of the script holds them, it says so (as a warning).

## Why is this bad?
Each stored tensor keeps its step's whole autograd graph reachable: on torch 2.13 `backward()`
releases the activations a graph saved but not its nodes, and a graph that was not back-propagated
(an output stored before the loss, an evaluation run with gradients enabled) keeps all of its saved
activations too. One graph per step stays in memory for as long as the container lives, so memory
grows every step until the process runs out.

## How to fix
Store `value.detach()` (or `value.item()` for a number) in the container. If the tensors must be
back-propagated together later (`torch.stack(losses).sum().backward()`), clear the container right
after that backward.""",
)

MEMORY_GROWS = Check(
    code="TP151",
    category=Category.MEMORY,
    severity=Severity.WARNING, evidence=Evidence.INFERRED,
    summary="Memory grows steadily from one training step to the next.",
    doc="""## What it does
Records, at the end of sampled steps after the first few, the memory the process uses:
`torch.cuda.memory_allocated()` on CUDA (exact, host-side, no sync) and the anonymous resident memory
(`/proc/self/statm`, resident minus file-backed pages, which the kernel evicts under memory pressure)
on the host. When it rises steadily over at least 20 steps by more than a
threshold (16 MiB allocated on CUDA; 64 MiB resident on the host, and only when tensors the script
can see explain the rise), it reports the rate in bytes per step, how long until the device or host
memory runs out at that rate, and the variable of the script holding the growing tensors when one
can be found.

## Why is this bad?
In a healthy loop every step frees what it allocated: the memory in use at a step's end is the same
from one step to the next (the first steps allocate the optimizer state and warm the caches). A
steady rise is something kept from every step — predictions or losses stored for later, an
autograd graph kept alive (TP101/TP102), a cache that is never trimmed — and it ends in an
out-of-memory error hours into the run, or in swapping that slows everything down.

## How to fix
Find what is kept from each step (the finding names the variable when it can): store
`.detach().cpu()` or `.item()` values instead of device tensors with graphs, aggregate metrics on the
fly instead of keeping every prediction, or bound the history (`collections.deque(maxlen=...)`).""",
)

CACHED_GAP = Check(
    code="TP152",
    category=Category.MEMORY,
    severity=Severity.INFO, evidence=Evidence.INFERRED,
    summary="The CUDA caching allocator reserves far more memory than the tensors ever used at once.",
    doc="""## What it does
Reads `torch.cuda.memory_stats()` at the end of sampled steps and reports once when the memory
reserved by PyTorch's caching allocator exceeds the peak of memory allocated to tensors by at least
1 GiB and a fifth of what is reserved.

## Why is this bad?
`nvidia-smi` shows what the caching allocator reserved from the driver (plus the CUDA context), not
what tensors use. On torch 2.13 freed blocks stay reserved for reuse, and blocks of one size cannot
serve a larger request: with changing shapes (variable sequence lengths or batch sizes) the
allocator keeps reserving new segments while the old ones sit idle. That memory is unavailable to
other processes, and a later large allocation can fail with "CUDA out of memory" although "reserved
but unallocated" memory is large.

## How to fix
Usually nothing is wrong with the model. To let the allocator reuse memory across shapes, set
`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` before the script starts; padding or bucketing
inputs to a few fixed shapes also helps. `torch.cuda.empty_cache()` only returns unused cached
memory to the driver (for other processes); it does not make more memory available to this one.""",
)


class _Sentinel:
    """Lives as long as the autograd node whose metadata holds it."""

    __slots__ = ("__weakref__", "step", "seq")

    def __init__(self, step: int, seq: int) -> None:
        self.step = step
        self.seq = seq


def _tensors(obj: Any, limit: int, depth: int = 0) -> Iterator[Any]:
    """Tensors in a module output (tensor, tuple/list, dict, dataclass-like ModelOutput), at most ``limit``."""
    import torch

    if isinstance(obj, torch.Tensor):
        yield obj
        return
    if depth > 2:
        return
    if isinstance(obj, dict):
        items = obj.values()
    elif isinstance(obj, (list, tuple)):
        items = obj
    else:
        return
    n = 0
    for item in items:
        for t in _tensors(item, limit - n, depth + 1):
            yield t
            n += 1
            if n >= limit:
                return


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def _growth(samples: list[tuple[int, int]], min_bytes: int) -> tuple[float, int, int] | None:
    """(bytes/step, first step, last step) when ``samples`` rise steadily by ``min_bytes`` or more.

    Steady: the median pairwise slope (Theil-Sen, robust to a single jump) is positive, at least 3 of
    4 consecutive samples do not go down, and each half of the span rises by a quarter of the total
    (a one-time jump followed by a plateau is not growth).
    """
    if len(samples) < 6 or samples[-1][0] - samples[0][0] < MIN_SPAN:
        return None
    (s0, v0), (s1, v1) = samples[0], samples[-1]
    total = v1 - v0
    if total < min_bytes:
        return None
    ups = sum(1 for (_, a), (_, b) in pairwise(samples) if b >= a)
    if ups < 0.75 * (len(samples) - 1):
        return None
    mid_step = (s0 + s1) / 2
    mid = min(samples, key=lambda sv: abs(sv[0] - mid_step))[1]
    if mid - v0 < total / 4 or v1 - mid < total / 4:
        return None
    pts = samples if len(samples) <= 60 else samples[:: len(samples) // 60 + 1]
    slopes = sorted((b - a) / (sb - sa) for i, (sa, a) in enumerate(pts) for sb, b in pts[i + 1:] if sb > sa)
    rate = slopes[len(slopes) // 2] if slopes else 0.0
    if rate <= 0:
        return None
    return rate, s0, s1


def _available_host_memory() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


# ---------------------------------------------------------------------------- the watcher
class _Track:
    """Memory samples of one place (the host's resident set, or one CUDA device's allocated bytes)."""

    def __init__(self, where: str, what: str, device_type: str, min_growth: int) -> None:
        self.where = where
        self.what = what
        self.device_type = device_type
        self.min_growth = min_growth
        self.samples: list[tuple[int, int]] = []
        self.rounds = 0
        self.done = False
        self.snap: tuple[int, int, int, dict[tuple[str, str], int]] | None = None  # step, value, tensors, holders


class MemoryWatcher(Watcher):
    """Graphs kept alive across steps (TP101/TP102), growing memory (TP151), cached CUDA memory (TP152)."""

    name = "memory"
    unsampled_calls = "none"
    checks = (GRAPH_ACCUMULATED, GRAPH_IN_CONTAINER, MEMORY_GROWS, CACHED_GAP)
    sampled_only = frozenset({"on_step_end"})

    def __init__(self) -> None:
        super().__init__()
        self._marks: list[tuple[weakref.ref, int, int]] = []   # (sentinel, step, sequence number)
        self._marked_step = -1
        self._marked_count = 0
        self._graphs_done = False
        self._graph_looks = 0
        self._graph_leak: str | None = None
        self._rss = Rss(anonymous=True)
        self._host = _Track("host", "anonymous resident memory (RSS)", "cpu", CPU_MIN_GROWTH)
        self._cuda: dict[int, _Track] = {}
        self._gaps: set[int] = set()
        self._peaks: dict[int, int] = {}
        self._compiling: Any = lambda: False

    def attach(self, session: Any) -> None:
        super().attach(session)
        import torch

        self._compiling = torch.compiler.is_compiling

    # ---------------------------------------------------------------- marking graphs
    def on_forward(self, module: Any, args: tuple, output: Any) -> None:
        session = self.session
        if not session.sampled or self._graphs_done or output is None or self._compiling():
            return
        step = session.step
        if self._marked_step != step:
            self._marked_step, self._marked_count = step, 0
        if self._marked_count >= MARKS_PER_STEP or (self._marked_count and session.depth):
            return  # inside a model, only the step's first graph-attached output; then the roots' outputs
        for t in _tensors(output, 2):
            fn = t.grad_fn
            if fn is None:
                continue
            try:
                meta = fn.metadata
                if _KEY in meta:
                    continue
                seq = fn._sequence_nr()
                sentinel = _Sentinel(step, seq)
                meta[_KEY] = sentinel
            except Exception:  # a node type without metadata
                continue
            self._marks.append((weakref.ref(sentinel), step, seq))
            self._marked_count += 1

    def _held(self, step: int) -> tuple[dict[int, int], list[int]]:
        """Marked nodes still alive that were created two or more steps ago (sequence number -> step),
        and their distinct steps."""
        alive = []
        held: dict[int, int] = {}
        for ref, mstep, seq in self._marks:
            if ref() is None:
                continue
            alive.append((ref, mstep, seq))
            if mstep <= step - 2:
                held[seq] = mstep
        self._marks = alive[-2000:]
        return held, sorted(set(held.values()))

    def _check_graphs(self, step: int) -> None:
        held, steps = self._held(step)
        if len(steps) < HELD_STEPS or steps[0] > step - HELD_AGE:
            return
        if any(isinstance(getattr(o, "defaults", None), dict) and o.defaults.get("differentiable")
               for o in self.session.optimizers()):
            self._graphs_done = True  # a differentiable optimizer keeps graphs across steps on purpose
            return
        gc.collect()  # graphs held only by garbage cycles are freed here, and are not a leak
        held, steps = self._held(step)
        if len(steps) < HELD_STEPS or steps[0] > step - HELD_AGE:
            return
        self._graph_looks += 1
        if self._explain_graphs(held, steps) or self._graph_looks >= 3:
            self._graphs_done = True
            self._marks = []

    def _explain_graphs(self, held: dict[int, int], steps: list[int]) -> bool:
        """Report who holds the graphs; False when unsure yet (look again later)."""
        found = []
        for holder in find_holders(script_frames(), self.session.names.root_modules()):
            value = holder.value
            if isinstance(value, deque) and value.maxlen is not None and value.maxlen <= BOUNDED_WINDOW:
                continue  # a short bounded window: its memory stops growing soon
            reached: set[int] = set()
            for t in flat_tensors(value):
                reached |= reached_steps(t, held)
            if len(reached) >= 2:
                found.append((holder, reached))
        if not found:
            if len(steps) < 2 * HELD_STEPS:
                return False
            self._graph_leak = "TP102"
            self.session.report(
                GRAPH_IN_CONTAINER,
                f"the autograd graphs of {len(steps)} earlier training steps (from step {steps[0]} on) are still "
                "alive, so memory grows every step; no variable of the script's training loop holds them "
                "(they may be kept by a closure, a library object, or an attribute set outside forward)",
                fix="find where model outputs or losses are stored across steps and store `value.detach()` or "
                    "`value.item()` instead",
                severity=Severity.WARNING, key="graphs", held_steps=len(steps))
            return True
        for holder, reached in found:
            value = holder.value
            if not isinstance(value, CONTAINERS):
                self._graph_leak = self._graph_leak or "TP101"
                self.session.report(
                    GRAPH_ACCUMULATED,
                    f"`{holder.label}` is accumulated from graph-attached tensors across training steps: its "
                    f"autograd graph reaches the graphs of {len(reached)} earlier steps and links one more every "
                    "step, so none of them is freed and memory grows until the process runs out",
                    subject=holder.label, path=holder.path or None, line=write_line(holder),
                    fix=f"accumulate a value without a graph: `{holder.label} += loss.detach()` (or `.item()`); "
                        "for a state carried across steps, `.detach()` it at the start of each step",
                    held_steps=len(reached))
            else:
                self._graph_leak = self._graph_leak or "TP102"
                self.session.report(
                    GRAPH_IN_CONTAINER,
                    f"the {type(value).__name__} `{holder.label}` ({len(value)} items) keeps graph-attached "
                    f"tensors from {len(reached)} earlier training steps: each keeps its step's autograd graph "
                    "alive, so memory grows every step",
                    subject=holder.label, path=holder.path or None, line=write_line(holder),
                    fix=f"store `value.detach()` (or `value.item()` for a number) in `{holder.label}`",
                    held_steps=len(reached), items=len(value))
        return True

    # ---------------------------------------------------------------- growth and caches
    def on_step_end(self, step: int) -> None:
        if not self.session.sampled:
            return
        if not self._graphs_done:
            self._check_graphs(step)
        if step < WARMUP:
            return
        if not self._host.done:
            rss = self._rss()
            if rss is not None:
                self._sample(self._host, step, rss)
        import torch

        if torch.cuda.is_initialized():
            self._check_cuda(step)

    def _check_cuda(self, step: int) -> None:
        import torch

        for device in range(torch.cuda.device_count()):
            stats = torch.cuda.memory_stats(device)  # host-side counters: no sync, no context creation
            reserved = stats.get("reserved_bytes.all.current", 0)
            if not reserved:
                continue  # a device this process does not use
            allocated = stats.get("allocated_bytes.all.current", 0)
            peak = self._peaks[device] = max(self._peaks.get(device, 0), allocated,
                                             stats.get("allocated_bytes.all.peak", 0))
            track = self._cuda.get(device)
            if track is None:
                track = self._cuda[device] = _Track(f"cuda:{device}", "allocated CUDA memory", "cuda",
                                                    CUDA_MIN_GROWTH)
            if not track.done:
                self._sample(track, step, allocated)
            if device not in self._gaps and reserved >= GAP_MIN and reserved - peak >= max(GAP_MIN // 2, reserved // 5):
                self._gaps.add(device)
                inactive = stats.get("inactive_split_bytes.all.current", 0)
                self.session.report(
                    CACHED_GAP,
                    f"the CUDA caching allocator reserves {_human(reserved)} on cuda:{device} (what nvidia-smi "
                    f"shows, plus the CUDA context) but tensors never used more than {_human(peak)} at once "
                    f"({_human(allocated)} at this step's end, {_human(inactive)} in free fragments of split "
                    "blocks): blocks cached for earlier shapes cannot serve new ones",
                    subject=f"cuda:{device}",
                    fix="nothing is wrong with the model; to let the allocator reuse memory across shapes, start the "
                        "script with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or pad inputs to a few fixed "
                        "shapes (torch.cuda.empty_cache() only gives cached memory back to other processes)",
                    reserved=reserved, peak_allocated=peak, allocated=allocated)

    def _sample(self, track: _Track, step: int, value: int) -> None:
        """Record a sample; on a steady rise, snapshot who holds tensors, and decide ten steps later."""
        track.samples.append((step, value))
        if track.snap is None:
            if _growth(track.samples, track.min_growth) is None:
                return
            holders = holder_bytes(find_holders(script_frames(), self.session.names.root_modules()), track.device_type)
            tensors = all_tensor_bytes(track.device_type) if track.device_type == "cpu" else 0
            track.snap = (step, value, tensors, {k: b for k, (_, b) in holders.items()})
            return
        s1, v1, t1, before = track.snap
        if step < s1 + 10:
            return
        grown = _growth(track.samples, track.min_growth)
        rise = value - v1
        if grown is None or rise <= 0:  # the rise stopped: not a leak (look once more later)
            track.rounds += 1
            track.snap = None
            track.done = track.rounds >= 2
            return
        track.done = True
        holders = holder_bytes(find_holders(script_frames(), self.session.names.root_modules()), track.device_type)
        best = None
        for key, (holder, nbytes) in holders.items():
            more = nbytes - before.get(key, 0)
            if more >= rise // 2 and (best is None or more > best[1]):
                best = (holder, more / (step - s1), nbytes)
        tensor_rate = None
        if best is None and track.device_type == "cpu":
            t2 = all_tensor_bytes("cpu")
            if t2 - t1 < rise // 2 and not self._graph_leak:
                return  # the resident set grows, but not because of tensors: allocator or Python objects
            tensor_rate = (t2 - t1) / (step - s1)
        self._report_growth(track, grown, value, best, tensor_rate)

    def _report_growth(self, track: _Track, grown: tuple[float, int, int], now: int,
                       holder: tuple[Holder, int, int] | None, tensor_rate: float | None) -> None:
        import torch

        rate, s0, s1 = grown
        if track.device_type == "cuda":
            index = int(track.where.split(":")[1])
            room: int | None = torch.cuda.get_device_properties(index).total_memory - now
        else:
            room = _available_host_memory()
        msg = (f"{track.what} of {track.where} grows by {_human(rate)} per step ({_human(now)} at step {s1}, "
               f"measured since step {s0})")
        if room is not None and room > 0:
            msg += f"; at this rate the {_human(room)} still free last about {int(room / rate):,} more steps"
        subject = path = line = None
        if holder is not None:
            h, per_step, nbytes = holder
            if isinstance(h.value, torch.Tensor):
                msg += (f"; the tensor `{h.label}` grows by {_human(per_step)} per step "
                        f"(now {tuple(h.value.shape)}, {_human(nbytes)})")
            else:
                msg += (f"; the {type(h.value).__name__} `{h.label}` gains {_human(per_step)} of tensors per step "
                        f"(now {len(h.value)} items, {_human(nbytes)})")
            subject, path, line = h.label, h.path or None, write_line(h)
        elif tensor_rate is not None and tensor_rate > 0:
            msg += f"; the tensors Python can see grow by {_human(tensor_rate)} per step"
        if self._graph_leak:
            msg += f"; autograd graphs kept across steps ({self._graph_leak}) are a cause"
        self.session.report(
            MEMORY_GROWS, msg, subject=subject, path=path, line=line, key=("growth", track.where),
            fix="keep `.item()` numbers or `.detach().cpu()` copies instead of tensors from every step, aggregate "
                "metrics on the fly, or bound the history with collections.deque(maxlen=...)",
            bytes_per_step=round(rate), device=track.where)

    def on_close(self) -> None:
        self._rss.close()
        self._marks = []
