"""A watchdog for hung distributed jobs: which collective, and which line, each rank is stuck in.

A daemon thread looks at the main thread's stack (``sys._current_frames()``) every few seconds. A
rank is *stalled* when its innermost frame (and the instruction in it) has not changed for a while;
blocked in a collective, a rank sits on one line of ``torch.distributed`` until its peers arrive.
After ``TORCHPACT_HANG_TIMEOUT / 2`` seconds (default 300 s) a stalled rank publishes where it is
through the job's store (``ddp_common.Exchange``); after the full timeout it reads the other ranks'
states and, when every rank is stalled and at least one of them waits in a collective, reports — from
the thread, through ``session.report``, so the rank's report file has it even if the rank is then
killed. Each rank reports its own wait, and lists the others', so the merged report shows what each
rank is waiting in: two ranks in different collectives, or at different steps, is a mismatch.

It does not rely on ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` (which crashed the DDP constructor with gloo
on torch 2.13). A rank that is busy (its stack changes) or that waits for a busy rank is not
reported: a long evaluation on rank 0 while the others wait in a barrier is not a hang.

Cost: no callback; a thread that wakes every few seconds, only in jobs with more than one rank.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from torchpact.findings import Category, Evidence, Severity
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers.ddp_common import Exchange

DEFAULT_TIMEOUT_S = 300.0
# How many timeouts every rank must wait at one and the same place before that counts as a hang.
SAME_PLACE_FACTOR = 3

STALLED = Check(
    code="TP655",
    category=Category.DISTRIBUTED,
    severity=Severity.WARNING, evidence=Evidence.INFERRED,
    summary="Every rank of the job stopped making progress, some of them inside a collective: the job hangs.",
    doc="""## What it does
A watchdog thread on every rank samples the main thread's stack. When no rank has moved for
`TORCHPACT_HANG_TIMEOUT` seconds (default 300) and at least one of them is blocked in a collective
(`torch.distributed.*`, DDP's buffer broadcast in forward, DDP's gradient all-reduce in backward),
each rank reports where it waits — the collective and the line of the script that called it, and
the step — together with what every other rank is doing. The report is saved at once, so it
survives the launcher killing the job.

## Why is this bad?
A collective completes only when every rank of the group calls it, in the same order. A rank that
skips one (a collective under `if rank == 0`, an extra batch on one rank, an exception swallowed on
one rank) leaves the others blocked until the collective timeout (30 minutes by default for gloo
and NCCL) with no hint of where; torch's own message, if any, comes at the timeout and names no line.

## How to fix
Compare the ranks' lines in the report. Different collectives, or the same one at different steps:
make every rank run the same collectives in the same order (no collective under a rank condition;
the same number of batches on every rank, see TP653). One rank not in a collective: that rank is
stuck in its own code (a DataLoader worker, I/O, a lock) or much slower than the others.""",
)

_TORCH_DIR = ""
_SKIP: tuple[str, ...] = ()


def _prefixes() -> tuple[str, ...]:
    global _SKIP, _TORCH_DIR
    if not _SKIP:
        import sysconfig  # here, on a hang: not in every run's start-up

        import torch

        _TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
        torchpact_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
        stdlib = sysconfig.get_paths().get("stdlib")
        _SKIP = (_TORCH_DIR, torchpact_dir) + ((os.path.abspath(stdlib) + os.sep,) if stdlib else ())
    return _SKIP


def describe(frame: Any) -> dict[str, Any]:
    """Where a stack waits: the collective (or None), and the innermost line of the user's own code."""
    skip = _prefixes()
    waiting_in = None
    user: tuple[str | None, int | None] = (None, None)
    names: list[str] = []
    while frame is not None:
        filename = frame.f_code.co_filename
        name = frame.f_code.co_name
        if filename.startswith(_TORCH_DIR):
            rel = filename[len(_TORCH_DIR):].replace(os.sep, "/")
            names.append(name)
            if waiting_in is None:
                if rel == "distributed/distributed_c10d.py" and not name.startswith("_"):
                    waiting_in = f"torch.distributed.{name}"
                elif rel == "nn/parallel/distributed.py":
                    if any("broadcast" in n or "sync_buffers" in n for n in names):
                        waiting_in = "DDP's buffer broadcast (forward)"
                    elif name in ("forward", "_pre_forward", "_post_forward"):
                        waiting_in = "DDP's forward"
                elif rel.startswith("autograd/") and name in ("_engine_run_backward", "backward"):
                    waiting_in = "backward() (DDP's gradient all-reduce)"
        elif not filename.startswith(skip) and not filename.startswith("<") and user[0] is None:
            user = (filename, frame.f_lineno)
        frame = frame.f_back
    return {"collective": waiting_in, "path": user[0], "line": user[1]}


def _timeout() -> float:
    try:
        return max(0.5, float(os.environ.get("TORCHPACT_HANG_TIMEOUT", DEFAULT_TIMEOUT_S)))
    except ValueError:
        return DEFAULT_TIMEOUT_S


def _where(state: dict[str, Any]) -> str:
    at = f"{os.path.basename(state['path'])}:{state['line']}" if state.get("path") else "an unknown line"
    what = f"waits in {state['collective']}" if state.get("collective") else "is stuck outside any collective"
    return f"{what} at {at} (step {state.get('step')})"


class DdpHangWatcher(Watcher):
    """TP655: a watchdog thread that names what each rank of a hung job waits in."""

    name = "ddp_hang"
    checks = (STALLED,)

    def __init__(self) -> None:
        super().__init__()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._main = threading.main_thread().ident
        self.timeout = _timeout()

    def attach(self, session: Any) -> None:
        super().attach(session)
        try:
            world_size = int(os.environ.get("WORLD_SIZE", "1"))
        except ValueError:
            world_size = 1
        if world_size < 2 or threading.current_thread() is not threading.main_thread():
            return
        _prefixes()
        self._thread = threading.Thread(target=self._run, name="torchpact-hang-watchdog", daemon=True)
        self._thread.start()

    def on_close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        poll = min(5.0, max(0.2, self.timeout / 5))
        signature: tuple | None = None
        since = time.monotonic()
        published = reported = False
        exchange: Exchange | None = None
        try:
            while not self._stop.wait(poll):
                # Hold the frame only for this look: a frame object kept alive keeps its locals (tensors) alive.
                frame = sys._current_frames().get(self._main)
                if frame is None:
                    return
                current = (id(frame), frame.f_lasti, frame.f_code, self.session.step)
                del frame
                now = time.monotonic()
                if current != signature:
                    if published and exchange is not None:
                        exchange.put(f"hang/{exchange.rank}", "")
                    signature, since, published, reported = current, now, False, False
                    continue
                stalled = now - since
                if stalled < self.timeout / 2 or reported:
                    continue
                exchange = exchange or Exchange.get("hang-watchdog")
                frame = sys._current_frames().get(self._main)
                state = describe(frame) | {"step": self.session.step, "stalled_s": round(stalled, 1)}
                del frame
                if not published and exchange is not None:
                    published = exchange.put(f"hang/{exchange.rank}",
                                             json.dumps(state | {"since": time.time() - stalled}))
                if stalled >= self.timeout:
                    reported = self._judge(state, exchange)
        except Exception:  # the watchdog must never take the rank down
            return

    def _judge(self, mine: dict[str, Any], exchange: Exchange | None) -> bool:
        """Report when every rank is stalled and one of them is in a collective; True once reported."""
        peers: dict[int, dict[str, Any]] = {}
        if exchange is not None:
            keys = [f"hang/{r}" for r in range(exchange.world_size) if r != exchange.rank]
            values = exchange.get_ready(keys)
            if values is None:
                return False  # some rank never stalled: it is busy, and this one waits for it
            now = time.time()
            for key, raw in zip(keys, values, strict=False):
                if not raw:
                    return False  # that rank moved again
                state = json.loads(raw)
                if now - state.get("since", now) < self.timeout / 2:
                    return False
                peers[int(key.rsplit("/", 1)[1])] = state
            rank = exchange.rank
        else:
            rank = self.session.rank if self.session.rank is not None else 0
            if not mine["collective"]:
                return False
        everyone = {rank: mine, **peers}
        if not any(s.get("collective") for s in everyone.values()):
            return False  # all ranks are busy in their own code (e.g. a long save): not a collective hang
        places = {(s.get("collective"), s.get("path"), s.get("line"), s.get("step")) for s in everyone.values()}
        if len(places) == 1 and mine["stalled_s"] < SAME_PLACE_FACTOR * self.timeout:
            # Every rank in the same collective is also what a slow collective looks like on a starved
            # machine: unlike a mismatch, it could still complete, so it must last longer before it counts.
            return False
        others = "; ".join(f"rank {r} {_where(s)}" for r, s in sorted(peers.items()))
        if len(places) > 1:
            why = ("the ranks are not in the same collective at the same step, so none of them can complete: a "
                   "collective mismatch (a collective under a rank condition, an extra batch on some ranks, an "
                   "exception swallowed on one rank)")
        else:
            why = ("every rank waits in the same collective, so it should have completed: check the network "
                   "(NCCL_DEBUG=INFO / GLOO_SOCKET_IFNAME) and whether another process group is involved")
        stalled = int(mine["stalled_s"])
        message = (f"no rank has made progress for {stalled} s: rank {rank} {_where(mine)}"
                   + (f"; {others}" if others else "") + f" — {why}; the job hangs until the collective timeout")
        self.session.report(
            STALLED, message, subject=mine.get("collective") or "no collective", path=mine.get("path"),
            line=mine.get("line"), step=mine.get("step"), severity=Severity.WARNING,
            fix="make every rank run the same collectives in the same order: no collective under a rank condition, "
                "the same number of batches on every rank (TP653); a rank outside any collective is stuck in its "
                "own code",
            key=("stalled", mine.get("collective"), mine.get("path"), mine.get("line")),
            ranks_waiting={str(r): s for r, s in sorted(everyone.items())})
        return True
