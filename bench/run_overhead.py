"""Overhead of `torchpact run` (default watchers) on a small GPT-style model training on CPU.

In one run, each variant trains the same model for the same steps in a fresh process; the training
loop's own time is compared (interpreter start and imports excluded). Variants are interleaved and
repeated; the median is used. Target: torchpact <= 1.10x plain python.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "gpt_train.py"
PY = sys.executable


def variants() -> dict[str, tuple[list[str], dict[str, str]]]:
    return {
        "plain python": ([PY, str(SCRIPT)], {}),
        "torchpact run": ([PY, "-m", "torchpact", "run", "--quiet", "--format", "json", "--output",
                           os.devnull, str(SCRIPT)], {}),
        "detect_anomaly": ([PY, str(SCRIPT)], {"TP_BENCH_MODE": "anomaly"}),
        "naive isfinite hooks": ([PY, str(SCRIPT)], {"TP_BENCH_MODE": "naive"}),
    }


def measure(cmd: list[str], env: dict[str, str], steps: int) -> float:
    full_env = dict(os.environ, TP_BENCH_STEPS=str(steps), **env)
    out = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=1200)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    for line in out.stdout.splitlines():
        if line.startswith("train_seconds "):
            return float(line.split()[1])
    sys.exit(f"no timing from {' '.join(cmd)}:\n{out.stdout[-2000:]}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--steps", type=int, default=120)
    args = ap.parse_args()
    times: dict[str, list[float]] = {name: [] for name in variants()}
    for _ in range(args.repeat):
        for name, (cmd, env) in variants().items():
            times[name].append(measure(cmd, env, args.steps))
    base = statistics.median(times["plain python"])
    print(f"{args.steps} steps, median of {args.repeat} interleaved runs per variant")
    print(f"{'variant':<22} {'seconds':>8} {'ratio':>7}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<22} {med:8.3f} {med / base:7.3f}x")
    ratio = statistics.median(times["torchpact run"]) / base
    print(f"\ntorchpact run / plain python: {ratio:.3f}x (target <= 1.10x)")
    print("PASS" if ratio <= 1.10 else "FAIL")
    return 0 if ratio <= 1.10 else 1


if __name__ == "__main__":
    sys.exit(main())
