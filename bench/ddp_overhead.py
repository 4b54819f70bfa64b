"""Overhead of `torchpact run --nproc 2` (all default watchers) against plain torchrun, in one run.

Both variants launch the same 2-rank gloo job on CPU: a small GPT-style model (bench/gpt_train.py's,
2 layers, d_model 128, sequence 64, batch 16 per rank) under DistributedDataParallel, trained for
``--steps`` steps. Each rank times its training loop alone (process start, imports, rendezvous and
model set-up excluded; the ranks meet in a barrier before and after); rank 0 prints the wall time,
and its CPU time (steadier on a shared machine, where other load stretches the wall time).
Variants are interleaved and repeated; the median is used. Target: torchpact <= 1.10x torchrun.
A third variant runs the ddp_* watchers alone, to tell their share.

    python bench/ddp_overhead.py [--repeat 3] [--steps 100]

Run with ``TP_DDP_BENCH_WORKER=1`` under a launcher, this file is the training script itself.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
PY = sys.executable
DDP_WATCHERS = "ddp_checkpoint,ddp_hang,ddp_sampler,ddp_straggler,ddp_sync,ddp_unused"


def worker() -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    sys.path.insert(0, str(HERE.parent))
    from gpt_train import GPT

    steps = int(os.environ.get("TP_BENCH_STEPS", "100"))
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(GPT(layers=2))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    generator = torch.Generator().manual_seed(rank)
    data = torch.randint(0, 512, (steps, 16, 65), generator=generator)
    dist.barrier()
    start, cpu_start = time.perf_counter(), time.process_time()
    for step in range(steps):
        batch = data[step]
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    cpu = time.process_time() - cpu_start  # before the barrier: a wait is not this rank's work
    dist.barrier()
    seconds = time.perf_counter() - start
    if rank == 0:
        print(f"train_seconds {seconds:.4f} cpu_seconds {cpu:.4f}", flush=True)
    dist.destroy_process_group()


def variants() -> dict[str, list[str]]:
    return {
        "plain torchrun": [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(HERE)],
        "torchpact run --nproc 2": [PY, "-m", "torchpact", "run", "--quiet", "--nproc", "2", "--format", "json",
                                    "--output", os.devnull, str(HERE)],
        "  (ddp_* watchers only)": [PY, "-m", "torchpact", "run", "--quiet", "--nproc", "2", "--format", "json",
                                    "--output", os.devnull, "--watchers", DDP_WATCHERS, str(HERE)],
    }


def measure(cmd: list[str], steps: int) -> tuple[float, float]:
    env = dict(os.environ, TP_DDP_BENCH_WORKER="1", TP_BENCH_STEPS=str(steps))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    for line in out.stdout.splitlines():
        if line.startswith("train_seconds "):
            words = line.split()
            return float(words[1]), float(words[3])
    sys.exit(f"no timing from {' '.join(cmd)}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steps", type=int, default=100)
    args = ap.parse_args()
    times: dict[str, list[float]] = {name: [] for name in variants()}
    cpu: dict[str, list[float]] = {name: [] for name in variants()}
    for _ in range(args.repeat):
        for name, cmd in variants().items():
            wall, used = measure(cmd, args.steps)
            times[name].append(wall)
            cpu[name].append(used)
    base = statistics.median(times["plain torchrun"])
    cpu_base = statistics.median(cpu["plain torchrun"])
    print(f"2 gloo ranks, {args.steps} steps, median of {args.repeat} interleaved runs per variant")
    print(f"{'variant':<26} {'wall s':>8} {'ratio':>7} {'cpu s':>8} {'ratio':>7}   wall of each run")
    for name, ts in times.items():
        med, cmed = statistics.median(ts), statistics.median(cpu[name])
        print(f"{name:<26} {med:8.3f} {med / base:7.3f}x {cmed:8.3f} {cmed / cpu_base:7.3f}x   "
              f"{', '.join(f'{t:.2f}' for t in ts)}")
    ratio = statistics.median(times["torchpact run --nproc 2"]) / base
    print(f"\ntorchpact run --nproc 2 / plain torchrun: {ratio:.3f}x (target <= 1.10x)")
    print("PASS" if ratio <= 1.10 else "FAIL")
    return 0 if ratio <= 1.10 else 1


if __name__ == "__main__":
    if os.environ.get("TP_DDP_BENCH_WORKER") == "1":
        worker()
    else:
        sys.exit(main())
