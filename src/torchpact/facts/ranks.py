"""Run a function on 2 local ranks of a real gloo process group, for distributed experiments.

``on_ranks(fn)`` forks the ranks from the experiment's process (torch is already imported there, so
starting them costs milliseconds, not an import of torch each), joins them under a hard deadline
and returns what ``fn(rank)`` returned on each rank, in rank order. Every collective has a time-out
too, so a broken experiment fails instead of hanging.
"""

from __future__ import annotations

import datetime
import gc
import multiprocessing as mp
import os
import socket
import time
import traceback
from typing import Any, Callable

WORLD = 2
COLLECTIVE_TIMEOUT_S = 20
DEADLINE_S = 45


class RankError(RuntimeError):
    """A rank raised, died or missed the deadline."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(fn: Callable[[int], Any], rank: int, port: int, conn) -> None:
    import torch
    import torch.distributed as dist

    code = 1
    try:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                                timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
        try:
            conn.send(("ok", fn(rank)))
            code = 0
        finally:
            gc.collect()  # DDP reducers must go before the process group does
            dist.destroy_process_group()
    except BaseException:
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()
        os._exit(code)  # no interpreter teardown in a forked child


def on_ranks(fn: Callable[[int], Any], deadline_s: float = DEADLINE_S) -> list[Any]:
    """``[fn(0), fn(1)]``, each computed in its own rank process of one gloo group."""
    import torch._dynamo  # noqa: F401  DDP imports it on construction: once here, not once per rank

    ctx = mp.get_context("fork")
    port = _free_port()
    pipes, procs = [], []
    for rank in range(WORLD):
        receive, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_rank_main, args=(fn, rank, port, send), daemon=True)
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
                raise RankError(f"rank {rank} died without a result") from None
            if status != "ok":
                raise RankError(f"rank {rank} raised:\n{value}")
            results[rank] = value
    finally:
        for proc in procs:
            proc.join(max(0.0, min(5.0, end - time.monotonic())))
            if proc.is_alive():
                proc.kill()
    return results
