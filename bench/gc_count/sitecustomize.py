"""Counts the full (generation 2) garbage collections of a process and their CPU time, from start-up on.

``bench/run_overhead.py`` puts this directory on PYTHONPATH of both variants it measures and names the
file to write in TP_BENCH_GC_OUT: with torch loaded one full collection costs 0.2-0.3 CPU-s, so one
collection more or fewer moves a run by a few percent, and the bench shows how many each run made.
Each process of the tree appends a line of its own (``torchpact run`` forks a child that runs the script: its
collections are the run's), counting from its start or, after a fork, from the fork; the bench sums them.
A process that ends in ``os._exit`` (a DataLoader worker, a forked child) writes nothing.
"""

import atexit
import gc
import os
import time

_OUT = os.environ.get("TP_BENCH_GC_OUT")
if _OUT:
    _full = [0, 0.0]
    _started = [0.0]

    def _count(phase: str, info: dict) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            _started[0] = time.process_time()
        else:
            _full[0] += 1
            _full[1] += time.process_time() - _started[0]

    def _write() -> None:
        with open(_OUT, "a") as f:
            f.write(f"{_full[0]} {_full[1]:.4f}\n")

    def _forked() -> None:
        _full[:] = [0, 0.0]

    gc.callbacks.append(_count)
    atexit.register(_write)
    os.register_at_fork(after_in_child=_forked)
