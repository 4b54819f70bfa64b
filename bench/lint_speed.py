"""Speed of `torchpact lint` against ruff and TorchFix, measured in the same run on the same files.

Whole corpus: torchpact vs `ruff check --select ALL` (target: torchpact <= 6x ruff's wall time).
A ~40k-line subset: torchpact vs `torchfix --select ALL` (target: torchpact >= 30x faster).
Each tool runs as a command, as users run it, with every core it wants; best of N runs.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from corpus import corpus_dir, count_lines, python_files

BIN = Path(sys.executable).parent


def timed(cmd: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        elapsed = time.perf_counter() - start
        if proc.returncode not in (0, 1):
            sys.exit(f"{cmd[0]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        best = min(best, elapsed)
    return best


def subset(files: list[Path], target_lines: int, dest: Path) -> int:
    """Copy whole files (every 7th, for variety) until about target_lines lines."""
    total = 0
    for i, f in enumerate(files[::7]):
        if total >= target_lines:
            break
        out = dest / f"{i:04d}_{f.name}"
        shutil.copy(f, out)
        total += f.read_bytes().count(b"\n")
    return total


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--subset-lines", type=int, default=40_000)
    args = ap.parse_args()
    folder = corpus_dir()
    files = python_files(folder)
    lines = count_lines(files)
    torchpact = [str(BIN / "torchpact"), "lint", "--format", "json", "-o", "/dev/null"]
    ruff = [str(BIN / "ruff"), "check", "--select", "ALL", "--no-cache", "--quiet", "--exit-zero", "--isolated"]
    print(f"corpus: {len(files)} files, {lines} lines")
    t_tp = timed(torchpact + [str(folder)], args.repeat)
    t_ruff = timed(ruff + [str(folder)], args.repeat)
    print(f"torchpact lint        {t_tp:7.2f} s  ({lines / t_tp:,.0f} lines/s)")
    print(f"ruff --select ALL     {t_ruff:7.2f} s  ({lines / t_ruff:,.0f} lines/s)")
    ratio_ruff = t_tp / t_ruff
    print(f"torchpact / ruff      {ratio_ruff:7.2f}x  (target <= 6x)")

    with tempfile.TemporaryDirectory() as tmp:
        n = subset(files, args.subset_lines, Path(tmp))
        t_tp_sub = timed(torchpact + [tmp], args.repeat)
        t_fix = timed([str(BIN / "torchfix"), "--select", "ALL", tmp], 1)
    print(f"\nsubset: {n} lines")
    print(f"torchpact lint        {t_tp_sub:7.2f} s  ({n / t_tp_sub:,.0f} lines/s)")
    print(f"torchfix --select ALL {t_fix:7.2f} s  ({n / t_fix:,.0f} lines/s)")
    speedup = t_fix / t_tp_sub
    print(f"torchfix / torchpact  {speedup:7.1f}x  (target >= 30x)")
    ok = ratio_ruff <= 6 and speedup >= 30
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
