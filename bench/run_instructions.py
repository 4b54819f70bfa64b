"""Instructions `torchpact run` executes on the workloads of bench/run_overhead.py, against plain python.

CPU time on a shared or drifting machine varies by 10% or more between two runs of the same command, so
the CPU-time bench cannot tell 1.03x from 1.06x in one sitting. The count of instructions a process
executes does not depend on machine load: valgrind's callgrind counts them (the whole process, start-up
and imports included), with the hash seed fixed, so a run is repeatable to about 0.1%. It is a proxy,
not the target: an instruction of the interpreter and one of a matmul kernel do not cost the same time,
and callgrind runs a process about 50x slower: with both variants side by side on two cores, the MLP
takes 5 minutes, the RL rollout 10 and the HF fine-tune 12; the GPT, whose matmul kernels callgrind
slows the most, had not finished after 75 minutes (27.6 G instructions in). Use it to compare two
versions of torchpact, or a workload against its target when the CPU-time bench cannot decide.

Needs ``valgrind`` on PATH.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_overhead import ENV, PY, TORCHPACT, WORKLOADS, write_bytecode  # noqa: E402


def instructions(cmd: list[str]) -> int:
    """Instructions executed by one run of ``cmd`` (its main process), counted by callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out", *cmd],
                             capture_output=True, text=True, env=dict(os.environ, **ENV, PYTHONHASHSEED="0"),
                             timeout=7200)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed under valgrind:\n{out.stderr[-3000:]}")
    found = re.search(r"Collected\s*:\s*(\d+)", out.stderr)
    if found is None:
        sys.exit(f"no instruction count in valgrind's output:\n{out.stderr[-3000:]}")
    return int(found.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), default=["mlp", "rl"],
                    help="workloads (default: mlp rl; under callgrind: mlp ~5 min, rl ~10, hf ~12, "
                         "gpt unfinished after 75)")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not on PATH")
    jobs = {(name, variant): cmd for name in args.only
            for variant, cmd in (("plain", [PY, str(WORKLOADS[name][0])]),
                                 ("torchpact", [*TORCHPACT, str(WORKLOADS[name][0])]))}
    write_bytecode(args.only)
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        counts = dict(zip(jobs, pool.map(instructions, jobs.values()), strict=True))
    print("instructions executed (callgrind, whole main process, PYTHONHASHSEED=0)")
    print(f"{'workload':<9} {'plain':>14} {'torchpact':>14} {'extra':>13} {'ratio':>7} {'target':>7}")
    for name in args.only:
        plain, tp = counts[(name, "plain")], counts[(name, "torchpact")]
        print(f"{name:<9} {plain:14,d} {tp:14,d} {tp - plain:13,d} {tp / plain:6.4f}x {WORKLOADS[name][1]:6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
