"""Every rank of a distributed job writing the same checkpoint file.

``torch.save`` is wrapped for the run (restored at the end; the wrapper calls the original with the
same arguments and returns what it returns). With more than one rank, each save to a path is counted
in the job's store (``ddp_common.Exchange``) under the host and the resolved path: a rank that saves
a path also saved by another rank reports it — at once when it is the later writer, else at a later
step or at the end (the last 8 paths are kept for that). Saves to buffers and file objects, and
per-rank paths, are not counted.

Cost: nothing unless ``torch.save`` is called; then three store round trips per save.
"""

from __future__ import annotations

import os
import socket
import time
import weakref
import zlib
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.frames import user_location
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers.ddp_common import Exchange, world

MAX_PENDING = 8

SAVED_BY_EVERY_RANK = Check(
    code="TP603",
    category=Category.DISTRIBUTED,
    severity=Severity.WARNING,
    summary="Several ranks wrote the same checkpoint file.",
    doc="""## What it does
Counts, across the ranks of a `torchpact run --nproc N` job, the ranks that call `torch.save` on the
same path (on the same host), and reports the save's line with the number of ranks that wrote it and
how long this rank's write took.

## Why is this bad?
Every rank of a DDP job holds the same replica, so an unguarded `torch.save` makes all of them
serialise the same object to the same file at about the same time: N ranks, N times the checkpoint
I/O, and N concurrent writers of one file (on torch 2.13 each write is complete, and the file on
disk is whichever finished last). If the ranks' states differ (per-rank optimizer shards, RNG
states, diverged replicas) the file holds one of them, arbitrarily.

## How to fix
Save from one rank: `if dist.get_rank() == 0: torch.save(...)`, then `dist.barrier()` if other
ranks read the file afterwards. For per-rank state, put the rank in the file name.""",
)


def _path_of(f: Any) -> str | None:
    if isinstance(f, (str, bytes, os.PathLike)):
        path = os.fsdecode(os.fspath(f))
        return os.path.realpath(path)
    return None


class DdpCheckpointWatcher(Watcher):
    """TP603 at runtime: the same checkpoint path written by several ranks."""

    name = "ddp_checkpoint"
    needs_process_group = True
    checks = (SAVED_BY_EVERY_RANK,)
    sampled_only = frozenset({"on_step_end"})

    def __init__(self) -> None:
        super().__init__()
        self._original: Any = None
        self._pending: dict[str, dict[str, Any]] = {}

    def attach(self, session: Any) -> None:
        super().attach(session)
        import torch

        original = torch.save
        watcher = weakref.ref(self)

        def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            result = original(obj, f, *args, **kwargs)
            w = watcher()
            if w is not None and w._original is original and not w.session.closed:
                try:
                    w._saved(f, time.perf_counter() - start)
                except Exception:  # observing must never break the user's save
                    pass
            return result

        save.__wrapped__ = original  # type: ignore[attr-defined]
        save.__doc__ = original.__doc__
        self._original = original
        torch.save = save

    def on_step_end(self, step: int) -> None:
        if self._pending and self.session.sampled:
            self._resolve()

    def on_close(self) -> None:
        import torch

        if self._original is not None:
            if getattr(torch.save, "__wrapped__", None) is self._original:
                torch.save = self._original
            self._original = None
        self._resolve()

    def _saved(self, f: Any, seconds: float) -> None:
        path = _path_of(f)
        if path is None:
            return
        where = world()
        if where is None or where[1] < 2:
            return
        exchange = Exchange.get()
        if exchange is None:
            return
        key = f"save/{zlib.crc32(f'{socket.gethostname()}:{path}'.encode()):08x}"
        if exchange.add(f"{key}/r{exchange.rank}", 1) == 1:
            exchange.add(f"{key}/ranks", 1)
        record = self._pending.get(key)
        if record is None:
            site = user_location(3)
            record = self._pending[key] = {"path": path, "site": site, "seconds": seconds, "saves": 0,
                                           "step": self.session.step}
        record["saves"] += 1
        while len(self._pending) > MAX_PENDING:  # e.g. one file per epoch, saved by rank 0 alone
            del self._pending[next(iter(self._pending))]
        self._resolve()

    def _resolve(self) -> None:
        exchange = Exchange.get() if self._pending else None
        if exchange is None:
            return
        for key, record in list(self._pending.items()):
            writers = exchange.add(f"{key}/ranks", 0)
            if writers is None or writers < 2:
                continue
            del self._pending[key]
            path, (src, line) = record["path"], record["site"]
            took = f", {record['seconds']:.2f} s for this rank's write" if record["seconds"] >= 0.01 else ""
            self.session.report(
                SAVED_BY_EVERY_RANK,
                f"{writers} of the job's {exchange.world_size} ranks wrote the same checkpoint file "
                f"`{os.path.basename(path)}` with torch.save: the same bytes written once per rank{took}, by "
                "concurrent writers of one file; the copy on disk is whichever rank finished last",
                subject=path, path=src, line=line, step=record["step"],
                fix="save from one rank only: `if dist.get_rank() == 0: torch.save(...)`, then `dist.barrier()` if "
                    "other ranks read it; put the rank in the file name for per-rank state",
                writers=writers)
