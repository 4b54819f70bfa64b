"""bench/run_overhead.py's measurement: the runs of a pair start together, and each one's CPU time is its own
process tree's (its children included), never the other run's."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "run_overhead", Path(__file__).parent.parent / "bench" / "run_overhead.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)

# A fixed amount of work: 3 million additions, in this process or in a child it waits for.
WORK = "s = 0\nfor i in range(3_000_000): s += i\n"
IN_CHILD = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {WORK!r}], check=True)"


def test_each_run_of_a_pair_is_charged_its_own_process_tree():
    idle, busy, parent = bench.measure([[sys.executable, "-c", "pass"], [sys.executable, "-c", WORK],
                                        [sys.executable, "-c", IN_CHILD]])
    # the same work, counted once for the process that did it and once for the parent that waited for it
    assert busy.cpu > 2 * idle.cpu and parent.cpu > 2 * idle.cpu
    assert all(run.wall > 0 and run.full >= 0 for run in (idle, busy, parent))


def test_a_failing_run_stops_the_bench_with_its_error():
    with pytest.raises(SystemExit, match="no such thing"):
        bench.measure([[sys.executable, "-c", "pass"],
                       [sys.executable, "-c", "import sys; sys.exit('no such thing')"]])


def test_collections_are_counted_in_every_process_of_the_tree(tmp_path):
    # torchpact run forks the process that runs the script: its full collections are the run's, counted once
    forked = ("import gc, os, sys\ngc.collect()\npid = os.fork()\nif pid == 0:\n    gc.collect(); gc.collect()\n"
              "    sys.exit(0)\nos.waitpid(pid, 0)\n")
    one, tree = bench.measure([[sys.executable, "-c", "import gc; gc.collect()"], [sys.executable, "-c", forked]])
    assert one.full == 1 and tree.full == 3  # the parent's one, the child's two (not the parent's copied into it)
