"""Overhead of `torchpact run` (default watchers) on four CPU workloads, against plain python.

Workloads (bench/workloads/ and bench/gpt_train.py): a small GPT (the training loop dominates), a
300-step tiny MLP (start-up dominates), an RL-style rollout (~26 tiny module calls per time step, 50
time steps per episode, one optimizer step per episode) and an HF Trainer fine-tune of a tiny random
GPT-2. Each variant runs as a fresh process with one thread; measured: the CPU time of the whole
process tree (children's rusage, start-up and imports included) and the wall time. Variants are
interleaved and repeated; the median is used, and ratios are taken within this run only (the
machine may be shared: compare ratios, not seconds). The paired ratio (median over repeats of
torchpact's run over the plain run made just before it) must meet the target too: on a machine
whose speed drifts by 10% between runs, the ratio of two medians can pass by luck. Targets: <= 1.05x each, <= 1.02x on the GPT.
Full garbage collections are counted in each run (bench/gc_count/sitecustomize.py, on PYTHONPATH of
both variants) and shown: with torch loaded each costs 0.2-0.3 CPU-s, so a run that makes one more or
one fewer differs by a few percent for that reason alone.
Python bytecode is cached (written before measuring by a compileall of torchpact and an untimed run
of each workload), as for installed packages: with PYTHONDONTWRITEBYTECODE set, as in some dev
shells, every run would compile torchpact's sources again, ~0.2 CPU-s no installed torchpact pays.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torchpact

HERE = Path(__file__).resolve().parent
PY = sys.executable
WORKLOADS = {
    "gpt": (HERE / "gpt_train.py", 1.02),
    "mlp": (HERE / "workloads" / "mlp_script.py", 1.05),
    "rl": (HERE / "workloads" / "rl_rollout.py", 1.05),
    "hf": (HERE / "workloads" / "hf_trainer.py", 1.05),
}
TORCHPACT = [PY, "-m", "torchpact", "run", "--quiet", "--format", "json", "--output", os.devnull]
ENV = {"TP_BENCH_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
       "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "PYTHONDONTWRITEBYTECODE": ""}


def measure(cmd: list[str]) -> tuple[float, float, int, float]:
    """(CPU seconds of the process tree, wall seconds, full garbage collections, their CPU seconds) of one
    run of ``cmd`` (collections counted by bench/gc_count/sitecustomize.py in the main process)."""
    with tempfile.TemporaryDirectory() as tmp:
        gc_out = os.path.join(tmp, "gc")
        env = dict(os.environ, **ENV, TP_BENCH_GC_OUT=gc_out,
                   PYTHONPATH=os.pathsep.join(filter(None, [str(HERE / "gc_count"), os.environ.get("PYTHONPATH")])))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if out.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
        try:
            count, gc_cpu = Path(gc_out).read_text().split()
        except (OSError, ValueError):
            count, gc_cpu = "0", "nan"
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, int(count), float(gc_cpu)


def median_interval(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval for the median of ``values``: the k-th smallest and k-th largest, with
    k the largest rank whose binomial coverage is still at least ``level`` (the whole range when even that
    falls short: 5 runs give 94%). Shown so that a ratio within the noise is read as such: this machine's
    run-to-run spread is about 1.7% for the same process, so 9 pairs resolve about 1%."""
    ordered = sorted(values)
    n = len(ordered)
    k = 1
    while k < n // 2 and 1 - 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n >= level:
        k += 1
    return ordered[k - 1], ordered[n - k]


def write_bytecode(names: list[str]) -> None:
    """Cache the bytecode of torchpact and of what each named workload imports, before measuring."""
    subprocess.run([PY, "-m", "compileall", "-q", os.path.dirname(torchpact.__file__)],
                   env=dict(os.environ, **ENV), timeout=600, check=True)
    for name in names:  # one unmeasured run each
        out = subprocess.run([PY, str(WORKLOADS[name][0])], env=dict(os.environ, **ENV), capture_output=True,
                             text=True, timeout=1800)
        if out.returncode != 0:
            sys.exit(f"{WORKLOADS[name][0]} failed:\n{out.stderr[-3000:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs per variant (median); 1 for a quick look")
    ap.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), help="a subset of the workloads")
    args = ap.parse_args()
    names = args.only or list(WORKLOADS)
    write_bytecode(names)
    runs: dict[tuple[str, str], list[tuple[float, float]]] = {}
    collections: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for _ in range(args.repeat):
        for name in names:
            script = str(WORKLOADS[name][0])
            for variant, cmd in (("plain", [PY, script]), ("torchpact", [*TORCHPACT, script])):
                cpu, wall, full, gc_cpu = measure(cmd)
                runs.setdefault((name, variant), []).append((cpu, wall))
                collections.setdefault((name, variant), []).append((full, gc_cpu))
                print(f"  {name} {variant}: {cpu:.2f} CPU-s, {wall:.2f} s, {full} full collections "
                      f"({gc_cpu:.2f} CPU-s)", file=sys.stderr, flush=True)
    print(f"median of {args.repeat} interleaved runs per variant; CPU = process tree, user + system; "
          "paired = median of the ratios of runs made side by side (less sensitive to a machine whose speed "
          "drifts; both must meet the target); best = ratio of the fastest runs (the least disturbed; shown only)")
    print(f"{'workload':<9} {'plain cpu':>9} {'tp cpu':>8} {'cpu ratio':>9} {'paired':>7} {'best':>7} {'plain wall':>10} "
          f"{'tp wall':>8} {'wall ratio':>10} {'target':>7}")
    ok = True
    intervals: dict[str, tuple[float, float]] = {}
    for name in names:
        plain, tp = runs[(name, "plain")], runs[(name, "torchpact")]
        pc, tc = (statistics.median(c for c, _ in r) for r in (plain, tp))
        pw, tw = (statistics.median(w for _, w in r) for r in (plain, tp))
        ratios = [t / p for (p, _), (t, _) in zip(plain, tp)]
        paired = statistics.median(ratios)
        intervals[name] = median_interval(ratios)
        best = min(c for c, _ in tp) / min(c for c, _ in plain)
        target = WORKLOADS[name][1]
        ok &= max(tc / pc, paired) <= target
        print(f"{name:<9} {pc:9.2f} {tc:8.2f} {tc / pc:8.3f}x {paired:6.3f}x {best:6.3f}x {pw:10.2f} {tw:8.2f} {tw / pw:9.3f}x "
              f"{target:6.2f}x")
    print("interval of the paired ratio's median (distribution-free, >= 95% where the runs allow; the whole range "
          "below 6 runs): " + ", ".join(f"{name} {lo:.3f}-{hi:.3f}x" for name, (lo, hi) in intervals.items()))
    print("full garbage collections per run (median count, median CPU-s in them): with torch loaded each "
          "costs 0.2-0.3 CPU-s, so one more or fewer moves a run by a few percent")
    for name in names:
        shown = []
        for variant in ("plain", "torchpact"):
            got = collections[(name, variant)]
            shown.append(f"{variant} {statistics.median(n for n, _ in got):g} "
                         f"({statistics.median(t for _, t in got):.2f} CPU-s)")
        print(f"  {name:<7} " + ", ".join(shown))
    print("PASS" if ok else "FAIL (CPU ratio above target)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
