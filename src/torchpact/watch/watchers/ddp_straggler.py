"""Stragglers: a rank that is slower than the others in one phase of the step, which every rank
then waits for.

On sampled steps each rank splits its step into phases: *data* (from the end of the previous
optimizer step to the first forward of the model: data loading, and whatever else runs between
steps), *forward* (the model's top-level forward calls), *backward* (the rest up to the optimizer
step: loss, backward with DDP's gradient all-reduce, clipping), and *optimizer* (the step itself).
Under DDP every rank finishes its step at about the same time, so a slow rank shows up as a larger
data / forward / optimizer time while the others spend the difference waiting in backward.

Every ``WINDOW`` steps and at the end, each rank publishes the medians of its sampled steps through
the job's store (``ddp_common.Exchange``); rank 0 compares them (never waiting during training; at
the end until every rank has published or said it is done, ``TORCHPACT_EXCHANGE_WAIT`` at most: a
rank that ends late, a straggler among them, must not fall out of the comparison) and reports the
rank and phase that hold the job back. Only when a DDP model spans every rank of the job (other
layouts, such as pipeline stages, differ by design).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from torchpact.findings import Category, Evidence, Severity
from torchpact.median import median
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers.ddp_common import NOT_COMPARED, Exchange, exchange_wait, group_ranks, is_ddp, not_compared

WARMUP_STEPS = 3
MIN_SAMPLES = 8
WINDOW = 50
MIN_EXCESS_S = 0.010      # a straggler costs at least this much per step ...
MIN_EXCESS_SHARE = 0.25   # ... and this share of the median step time ...
MIN_RATIO = 2.0           # ... and the phase takes at least this many times the other ranks' median
PHASES = ("data", "forward", "optimizer")

STRAGGLER = Check(
    code="TP654",
    category=Category.PERFORMANCE,
    severity=Severity.WARNING, evidence=Evidence.INFERRED,
    summary="One rank is slower than the others in one phase of the step, and every rank waits for it.",
    doc="""## What it does
On sampled steps, splits each rank's training step into data loading (from the end of one optimizer
step to the next forward), forward, backward and optimizer step, and compares the medians across the
ranks of a DDP job (through the job's store). When one rank spends much longer in data loading,
forward or the optimizer step than the others — at least 10 ms and a quarter of the step, and twice
the other ranks' median — it reports the rank, the phase, and how long the others wait for it.

## Why is this bad?
DDP's gradient all-reduce is a meeting point: every step runs at the pace of the slowest rank, and
the others wait in backward for it. One slow rank (a slow or shared device, a data shard with longer
samples, too few DataLoader workers on one node, logging or evaluation done on rank 0 only, between
steps) slows the whole job down by the difference, on every rank.

## How to fix
Data loading: more DataLoader workers, `pin_memory=True`, faster or local storage on that rank's
node, balanced shards (bucket by length); move rank-0-only logging and evaluation out of the step,
or make it asynchronous. Forward / optimizer: check that rank's device (other processes on it,
throttling, CPU thread settings) and that its batches are not larger than the others'.""",
)


class DdpStragglerWatcher(Watcher):
    """TP654: the rank and phase that hold a DDP job back."""

    name = "ddp_straggler"
    needs_process_group = True
    unsampled_calls = "none"
    checks = (STRAGGLER, NOT_COMPARED)
    sampled_only = frozenset({"on_step_pre"})

    def __init__(self) -> None:
        super().__init__()
        self._active = os.environ.get("WORLD_SIZE", "1") not in ("", "0", "1")  # torchrun sets it
        now = time.perf_counter()
        self._step_end = now
        self._first_forward: float | None = None
        self._forward_start = 0.0
        self._forward = 0.0
        self._step_pre: float | None = None
        self._samples: list[tuple[float, float, float, float, float]] = []  # data, forward, backward, opt, total
        self._published = 0
        self._pending_tags: list[str] = []
        self._reported = False
        self._joined = False  # the job's store opened: it serves the end's exchange after destroy_process_group
        self._spanned = False  # a DDP model spans every rank (known while the group exists)

    # ------------------------------------------------------------------ timing
    def on_forward_pre(self, module: Any, args: tuple) -> None:
        if self._active and self.session.sampled and self.session.depth == 1:
            now = time.perf_counter()
            if self._first_forward is None:
                self._first_forward = now
            self._forward_start = now

    def on_forward(self, module: Any, args: tuple, output: Any) -> None:
        if self._active and self.session.sampled and self._first_forward is not None and self.session.depth == 0:
            self._forward += time.perf_counter() - self._forward_start

    def on_step_pre(self, optimizer: Any) -> None:
        if self._active and self._step_pre is None and self.session.sampled:
            self._step_pre = time.perf_counter()

    def on_step_end(self, step: int) -> None:
        if not self._active:
            return
        if not self._joined:  # now, while the group exists: a script may destroy it before the end's exchange
            self._joined = True
            exchange = Exchange.get()
            if exchange is not None:
                self._spans(exchange.world_size)
        now = time.perf_counter()
        if self.session.sampled and step >= WARMUP_STEPS and self._first_forward is not None and self._step_pre:
            data = self._first_forward - self._step_end
            total = now - self._step_end
            opt = now - self._step_pre
            backward = max(0.0, total - data - self._forward - opt)
            self._samples.append((data, self._forward, backward, opt, total))
        self._step_end = now
        self._first_forward, self._step_pre, self._forward = None, None, 0.0
        if step and step % WINDOW == 0:
            self._exchange(str(step))
        elif self._pending_tags:
            self._collect(final=False)

    def on_close(self) -> None:
        if self._active:
            self._exchange("final", final=True)

    # ------------------------------------------------------------------ across ranks
    def _spans(self, world_size: int) -> bool:
        if not self._spanned:
            self._spanned = self._spans_world(world_size)
        return self._spanned

    def _spans_world(self, world_size: int) -> bool:
        for module in self.session.names.root_modules():
            if is_ddp(module) and len(group_ranks(module)) == world_size:
                return True
        return False

    def _medians(self) -> dict[str, float] | None:
        if len(self._samples) < MIN_SAMPLES:
            return None
        columns = list(zip(*self._samples, strict=True))
        names = ("data", "forward", "backward", "optimizer", "total")
        return {name: median(col) for name, col in zip(names, columns, strict=True)} | {"n": len(self._samples)}

    def _exchange(self, tag: str, final: bool = False) -> None:
        """Publish this rank's medians under ``tag``; at the end (``final``) say this rank is done, then (rank 0)
        compare what every rank published."""
        exchange = Exchange.get()
        if exchange is None:
            return
        medians = None if self._reported or not self._spans(exchange.world_size) else self._medians()
        if medians is not None:
            exchange.put(f"strag/{tag}/{exchange.rank}", json.dumps(medians))
            if exchange.rank == 0:
                self._pending_tags.append(tag)
        if final:
            exchange.close(self.name)
        if exchange.rank == 0 and self._pending_tags:
            self._collect(final)

    def _collect(self, final: bool) -> None:
        exchange = Exchange.get()
        if exchange is None:
            return
        still = []
        for tag in self._pending_tags:
            keys = [f"strag/{tag}/{r}" for r in range(exchange.world_size)]
            if final:  # however late the other ranks end: a straggler may well end last
                start = time.monotonic()
                got, reason = exchange.wait_for(keys, range(1, exchange.world_size), self.name, exchange_wait())
                values = [got[k] for k in keys] if len(got) == len(keys) else None
                if values is None and tag == "final" and reason in ("timeout", "gone") and not self._reported:
                    late = [r for r, k in enumerate(keys) if k not in got]
                    not_compared(self.session, self.name, "the ranks' step times at the end", reason, late,
                                 time.monotonic() - start)
            else:
                values = exchange.get_ready(keys)
            if values is None:
                still.append(tag)
                continue
            exchange.delete(*keys)
            try:
                per_rank = [json.loads(v) for v in values]
            except ValueError:
                continue
            if not self._reported:
                self._judge(per_rank, tag)
        self._pending_tags = [] if final else still[-4:]

    def _judge(self, per_rank: list[dict[str, float]], tag: str) -> None:
        worst = find_straggler(per_rank)
        if worst is None:
            return
        excess, rank, phase, others = worst
        step_time = median(r["total"] for r in per_rank)
        mine = per_rank[rank]
        waiting = median(v["backward"] for q, v in enumerate(per_rank) if q != rank)
        what = {"data": "loading data (from the end of an optimizer step to the next forward: the DataLoader, "
                        "and anything else run between steps, such as logging)",
                "forward": "the model's forward", "optimizer": "the optimizer step"}[phase]
        fix = {"data": "more DataLoader workers or pin_memory on that rank, faster or local storage on its node, "
                       "shards of equal cost; move rank-only logging or evaluation out of the training step",
               "forward": "check that rank's device (shared with other processes, throttled, fewer CPU threads) "
                          "and that its batches are not larger or longer than the other ranks'",
               "optimizer": "check that rank's device, and that its optimizer is configured like the others'"}[phase]
        self.session.report(
            STRAGGLER,
            f"rank {rank} holds the job back: it spends {mine[phase] * 1e3:.1f} ms per step in {what}, the other ranks "
            f"{others * 1e3:.1f} ms (medians of {int(mine['n'])} sampled steps); they wait for it in backward (DDP's "
            f"gradient all-reduce): {waiting * 1e3:.1f} ms there against {mine['backward'] * 1e3:.1f} ms on rank "
            f"{rank}, so every step takes about {excess * 1e3:.0f} ms longer than it would without the straggler "
            f"({excess / max(step_time, 1e-9):.0%} of the {step_time * 1e3:.1f} ms step)",
            subject=f"rank {rank}", fix=fix, key=("straggler", rank, phase), straggler=rank, phase=phase,
            per_rank={str(r): {k: round(v, 6) for k, v in d.items()} for r, d in enumerate(per_rank)})
        self._reported = True


def find_straggler(per_rank: list[dict[str, float]]) -> tuple[float, int, str, float] | None:
    """(excess seconds per step, rank, phase, the other ranks' median) of the rank that holds the job back
    most, or None. A pure function of the per-rank medians, so the decision is tested on synthetic
    timings (real ones depend on the machine's load)."""
    step_time = median(r["total"] for r in per_rank)
    worst: tuple[float, int, str, float] | None = None
    for rank, values in enumerate(per_rank):
        for phase in PHASES:
            others = median(v[phase] for q, v in enumerate(per_rank) if q != rank)
            excess = values[phase] - others
            if (excess >= max(MIN_EXCESS_S, MIN_EXCESS_SHARE * step_time)
                    and values[phase] >= MIN_RATIO * others and (worst is None or excess > worst[0])):
                worst = (excess, rank, phase, others)
    return worst
