"""Run a function on 2 local ranks of a real gloo process group, for distributed experiments.

``on_ranks(fn)`` forks the ranks from the experiment's process (torch is already imported there, so
starting them costs milliseconds, not an import of torch each), joins them under a hard deadline
and returns what ``fn(rank)`` returned on each rank, in rank order. Every collective has a time-out
too, so a broken experiment fails instead of hanging.

The ranks meet through a ``FileStore`` in a fresh folder, not a TCP port picked in advance: a port
found free can be taken by anyone before rank 0 binds it, and the whole test suite starts process
groups side by side. A rank killed by a signal (a crash below Python, seen once in hundreds of CI
runs) gets the experiment one more try; a rank that raises or misses the deadline does not.
"""

from __future__ import annotations

import datetime
import gc
import multiprocessing as mp
import os
import tempfile
import time
import traceback
from typing import Any, Callable

from torchpact.facts import how_it_ended

WORLD = 2
COLLECTIVE_TIMEOUT_S = 20
DEADLINE_S = 45


class RankError(RuntimeError):
    """A rank raised, died or missed the deadline."""


class _RankDied(RankError):
    """A rank ended without sending a result: killed below Python, not by the experiment's code."""


def _rank_main(fn: Callable[[int], Any], rank: int, store_path: str, conn) -> None:
    import torch
    import torch.distributed as dist

    code = 1
    try:
        try:
            torch.set_num_threads(1)
            dist.init_process_group("gloo", store=dist.FileStore(store_path, WORLD), rank=rank, world_size=WORLD,
                                    timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
            conn.send(("ok", fn(rank)))
            code = 0
        except BaseException:
            conn.send(("error", traceback.format_exc()))
        conn.close()  # the result is out before the teardown, which can wait on the other rank
        if dist.is_initialized():
            gc.collect()  # DDP reducers must go before the process group does
            dist.destroy_process_group()
    finally:
        os._exit(code)  # no interpreter teardown in a forked child


def on_ranks(fn: Callable[[int], Any], deadline_s: float = DEADLINE_S) -> list[Any]:
    """``[fn(0), fn(1)]``, each computed in its own rank process of one gloo group."""
    import torch._dynamo  # noqa: F401  DDP imports it on construction: once here, not once per rank

    try:
        return _attempt(fn, deadline_s)
    except _RankDied as died:
        print(f"(retried once: {died})")
        return _attempt(fn, deadline_s)


def _attempt(fn: Callable[[int], Any], deadline_s: float) -> list[Any]:
    ctx = mp.get_context("fork")
    pipes, procs = [], []
    with tempfile.TemporaryDirectory(prefix="torchpact-ranks-") as folder:
        store_path = os.path.join(folder, "store")
        for rank in range(WORLD):
            receive, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_rank_main, args=(fn, rank, store_path, send), daemon=True)
            proc.start()
            send.close()
            pipes.append(receive)
            procs.append(proc)
        results: list[Any] = [None] * WORLD
        end = time.monotonic() + deadline_s
        try:
            for rank, receive in enumerate(pipes):
                if not receive.poll(max(0.0, end - time.monotonic())):
                    raise RankError(f"rank {rank} gave no result within {deadline_s:g} s")
                try:
                    status, value = receive.recv()
                except EOFError:
                    procs[rank].join(1.0)
                    code = procs[rank].exitcode
                    error = _RankDied if code is not None and code < 0 else RankError
                    raise error(f"rank {rank} died without a result ({how_it_ended(code)})") from None
                if status != "ok":
                    raise RankError(f"rank {rank} raised:\n{value}")
                results[rank] = value
        finally:
            for proc in procs:
                proc.join(max(0.0, min(5.0, end - time.monotonic())))
                if proc.is_alive():
                    proc.kill()
                    proc.join(1.0)
    return results
