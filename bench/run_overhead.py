"""Overhead of `torchpact run` (default watchers) on four CPU workloads, against plain python.

Workloads (bench/workloads/ and bench/gpt_train.py): a small GPT (the training loop dominates), a
300-step tiny MLP (start-up dominates), an RL-style rollout (~26 tiny module calls per time step, 50
time steps per episode, one optimizer step per episode) and an HF Trainer fine-tune of a tiny random
GPT-2, and a script with no training step (imports torch, builds an optimizer: start-up, judged by the CPU
seconds added, <= 0.05). Each variant runs as a fresh process with one thread; measured: the CPU time of the whole
process tree (its rusage, children included: start-up and imports too) and the wall time. Ratios are
taken within this run only (the machine may be shared: compare ratios, not seconds).

Side by side: with two CPUs or more, the plain run and the torchpact run of each pair start together,
one per core (which starts first alternates), so that whatever slows the machine during the pair
slows both. Run one after the other, two runs of the same command on this 2-core machine differ by
3-4% (a pair's ratio: standard deviation 2.9-4.2% over 12 pairs of the MLP); side by side, 0.6-0.9%,
with the same median (MLP 1.036x side by side, 1.035x one after the other). ``--sequential`` runs them
one after the other, interleaved, as before. The paired ratio (median over repeats of torchpact's
run over the plain run of its pair) and the ratio of the medians must both meet the target.
Targets: <= 1.05x each, <= 1.02x on the GPT.
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
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

import torchpact

HERE = Path(__file__).resolve().parent
PY = sys.executable
WORKLOADS = {
    "gpt": (HERE / "gpt_train.py", 1.02),
    "mlp": (HERE / "workloads" / "mlp_script.py", 1.05),
    "rl": (HERE / "workloads" / "rl_rollout.py", 1.05),
    "hf": (HERE / "workloads" / "hf_trainer.py", 1.05),
    "startup": (HERE / "workloads" / "startup_script.py", None),  # judged by CPU-s added: STARTUP_EXTRA
}
STARTUP_EXTRA = 0.05  # CPU-s torchpact may add to a script with no training step (median of the pairs' differences)
TORCHPACT = [PY, "-m", "torchpact", "run", "--quiet", "--format", "json", "--output", os.devnull]
ENV = {"TP_BENCH_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
       "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "PYTHONDONTWRITEBYTECODE": ""}


TIMEOUT_S = 1800  # a run still going after this is killed, and the bench stops with its stderr


class Run(NamedTuple):
    cpu: float       # CPU seconds of the process tree, user + system
    wall: float      # seconds
    full: int        # full garbage collections (bench/gc_count/sitecustomize.py)
    gc_cpu: float    # CPU seconds in them


def measure(cmds: list[list[str]], env_extra: dict[str, str] | None = None, cwd: str | None = None,
            envs: list[dict[str, str] | None] | None = None) -> list[Run]:
    """One run of each of ``cmds``, all started together (each with a core of its own when there are as many);
    ``env_extra`` adds to their environment (a PYTHONPATH there goes before the gc counter's), in ``cwd``;
    ``envs``, one per command, adds to that command's only."""
    with tempfile.TemporaryDirectory() as tmp:
        results: list[Run | None] = [None] * len(cmds)
        failures: list[str] = []

        def one(i: int) -> None:
            gc_out, err_path = os.path.join(tmp, f"gc{i}"), os.path.join(tmp, f"err{i}")
            extra = dict(env_extra or {}, **((envs[i] or {}) if envs else {}))
            path = [str(HERE / "gc_count"), extra.pop("PYTHONPATH", None), os.environ.get("PYTHONPATH")]
            env = dict(os.environ, **ENV, **extra, TP_BENCH_GC_OUT=gc_out,
                       PYTHONPATH=os.pathsep.join(filter(None, path)))
            with open(err_path, "w") as err:
                start = time.perf_counter()
                proc = subprocess.Popen(cmds[i], env=env, stdout=subprocess.DEVNULL, stderr=err, cwd=cwd)
                stuck = threading.Timer(TIMEOUT_S, proc.kill)
                stuck.start()
                # wait4 gives this process's own rusage, its reaped children included: the process tree
                _, status, usage = os.wait4(proc.pid, 0)
                wall = time.perf_counter() - start
                stuck.cancel()
            proc.returncode = os.waitstatus_to_exitcode(status)
            if proc.returncode != 0:
                failures.append(f"{' '.join(cmds[i])} failed:\n{Path(err_path).read_text()[-3000:]}")
                return
            try:  # a line per process of the tree that ended through Python's shutdown
                lines = [line.split() for line in Path(gc_out).read_text().splitlines() if line.strip()]
                count, gc_cpu = sum(int(c) for c, _ in lines), sum(float(t) for _, t in lines)
            except (OSError, ValueError):
                count, gc_cpu = 0, float("nan")
            results[i] = Run(usage.ru_utime + usage.ru_stime, wall, count, gc_cpu)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(cmds))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if failures:
        sys.exit(failures[0])
    return [r for r in results if r is not None]


def median_interval(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval for the median of ``values``: the k-th smallest and k-th largest, with
    k the largest rank whose binomial coverage is still at least ``level`` (the whole range when even that
    falls short: 5 runs give 94%). Shown so that a ratio within the noise is read as such: side by side, a
    pair's ratio varies by about 0.9% on this machine, so 9 pairs resolve about 0.5%."""
    ordered = sorted(values)
    n = len(ordered)
    k = 1
    while k < n // 2 and 1 - 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n >= level:
        k += 1
    return ordered[k - 1], ordered[n - k]


def write_bytecode(names: list[str], baseline: str | None = None) -> None:
    """Cache the bytecode of torchpact (and of the baseline's) and of what each named workload imports, before
    measuring."""
    for package in [os.path.dirname(torchpact.__file__), *([os.path.join(baseline, "torchpact")] if baseline else [])]:
        subprocess.run([PY, "-m", "compileall", "-q", package], env=dict(os.environ, **ENV), timeout=600, check=True)
    for name in names:  # one unmeasured run each
        out = subprocess.run([PY, str(WORKLOADS[name][0])], env=dict(os.environ, **ENV), capture_output=True,
                             text=True, timeout=1800)
        if out.returncode != 0:
            sys.exit(f"{WORKLOADS[name][0]} failed:\n{out.stderr[-3000:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs per variant (median); 1 for a quick look")
    ap.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), help="a subset of the workloads")
    ap.add_argument("--sequential", action="store_true",
                    help="run the two variants one after the other, not side by side (the default with 2+ CPUs)")
    ap.add_argument("--baseline", metavar="SRC",
                    help="also run torchpact from this source folder (a checkout's src/ of another commit) in each "
                         "set, beside the others: its figures are shown under this one's, from the same sets")
    args = ap.parse_args()
    names = args.only or list(WORKLOADS)
    side_by_side = not args.sequential and len(os.sched_getaffinity(0)) >= 2
    if args.baseline and not os.path.isfile(os.path.join(args.baseline, "torchpact", "__init__.py")):
        ap.error(f"--baseline {args.baseline}: no torchpact package there (give a checkout's src/)")
    write_bytecode(names, args.baseline)
    runs: dict[tuple[str, str], list[Run]] = {}
    for k in range(args.repeat):
        for name in names:
            script = str(WORKLOADS[name][0])
            variants: list[tuple[str, list[str], dict[str, str] | None]] = [
                ("plain", [PY, script], None), ("torchpact", [*TORCHPACT, script], None)]
            if args.baseline:
                variants.append(("baseline", [*TORCHPACT, script], {"PYTHONPATH": args.baseline}))
            variants = variants[k % len(variants):] + variants[:k % len(variants)]  # who starts first turns
            if side_by_side:
                measured = measure([cmd for _, cmd, _ in variants], envs=[env for _, _, env in variants])
            else:
                measured = [measure([cmd], env)[0] for _, cmd, env in variants]
            for (variant, _, _), run in zip(variants, measured, strict=True):
                runs.setdefault((name, variant), []).append(run)
                print(f"  {name} {variant}: {run.cpu:.2f} CPU-s, {run.wall:.2f} s, {run.full} full collections "
                      f"({run.gc_cpu:.2f} CPU-s)", file=sys.stderr, flush=True)
    how = "run side by side, one per core" if side_by_side else "run one after the other"
    print(f"median of {args.repeat} pairs of runs, the two variants of a pair {how}; CPU = process tree, user + "
          "system; paired = median of the ratios within pairs (both it and the ratio of the medians must meet the "
          "target); best = ratio of the fastest runs (the least disturbed; shown only)")
    print(f"{'workload':<9} {'plain cpu':>9} {'tp cpu':>8} {'cpu ratio':>9} {'paired':>7} {'best':>7} "
          f"{'plain wall':>10} {'tp wall':>8} {'wall ratio':>10} {'target':>7}")
    ok = True
    intervals: dict[str, tuple[float, float]] = {}
    for name in names:
        plain, tp = runs[(name, "plain")], runs[(name, "torchpact")]
        pc, tc = (statistics.median(run.cpu for run in r) for r in (plain, tp))
        pw, tw = (statistics.median(run.wall for run in r) for r in (plain, tp))
        ratios = [t.cpu / p.cpu for p, t in zip(plain, tp, strict=True)]
        paired = statistics.median(ratios)
        intervals[name] = median_interval(ratios)
        best = min(run.cpu for run in tp) / min(run.cpu for run in plain)
        target = WORKLOADS[name][1]
        base = runs.get((name, "baseline"), [])  # (only with --baseline: not judged)
        if target is None:  # start-up: the CPU seconds added
            extra = statistics.median(t.cpu - p.cpu for p, t in zip(plain, tp, strict=True))
            ok &= extra <= STARTUP_EXTRA
            print(f"{name:<9} {pc:9.2f} {tc:8.2f} {'':>9} {'':>7} {'':>7} {pw:10.2f} {tw:8.2f} {tw / pw:9.3f}x "
                  f"paired difference {extra:+.3f} CPU-s (target <= +{STARTUP_EXTRA:.2f})")
            if base:
                print(f"  baseline: paired difference "
                      f"{statistics.median(b.cpu - p.cpu for p, b in zip(plain, base, strict=True)):+.3f} CPU-s; "
                      f"this one less the baseline, paired "
                      f"{statistics.median(t.cpu - b.cpu for b, t in zip(base, tp, strict=True)):+.3f} CPU-s")
            continue
        ok &= max(tc / pc, paired) <= target
        print(f"{name:<9} {pc:9.2f} {tc:8.2f} {tc / pc:8.3f}x {paired:6.3f}x {best:6.3f}x {pw:10.2f} {tw:8.2f} "
              f"{tw / pw:9.3f}x {target:6.2f}x")
        if base:
            bc = statistics.median(run.cpu for run in base)
            print(f"  baseline: {bc:8.2f} CPU-s {bc / pc:8.3f}x, paired "
                  f"{statistics.median(b.cpu / p.cpu for p, b in zip(plain, base, strict=True)):6.3f}x")
    print("interval of the paired ratio's median (distribution-free, >= 95% where the runs allow; the whole range "
          "below 6 runs): " + ", ".join(f"{name} {lo:.3f}-{hi:.3f}x" for name, (lo, hi) in intervals.items()))
    print("full garbage collections per run (median count, median CPU-s in them): with torch loaded each "
          "costs 0.2-0.3 CPU-s, so one more or fewer moves a run by a few percent")
    for name in names:
        shown = []
        for variant in ("plain", "torchpact"):
            got = runs[(name, variant)]
            shown.append(f"{variant} {statistics.median(run.full for run in got):g} "
                         f"({statistics.median(run.gc_cpu for run in got):.2f} CPU-s)")
        print(f"  {name:<7} " + ", ".join(shown))
    print("PASS" if ok else "FAIL (CPU ratio above target)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
