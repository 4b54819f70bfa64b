"""Speed of `torchpact lint`, in CPU seconds (user + system, every process of the run), so the
figures hold on a shared machine where wall time depends on the neighbours.

Targets (issue 10):
- whole corpus, cold (`--no-cache`), each project linted from its own folder as its users would:
  at most 2x the CPU time of `ruff check --select ALL` on the same folders;
- the slowest single file under 1 s;
- a generated pathological file (one name re-bound many times, in nested loops) under 1 s;
- a cached re-lint of the unchanged corpus under 10% of the cold run;
- a ~40k-line subset: at least 30x faster than `torchfix --select ALL` (wall time, best of 3, as before).

Usage: python bench/lint_speed.py [--projects a,b] [--skip-ruff]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from corpus import corpus_dir, count_lines, python_files

from torchpact.config import Config
from torchpact.lint.engine import lint_file
from torchpact.lint.files import discover

BIN = Path(sys.executable).parent


# As installed by pip, torchpact runs from compiled bytecode; a PYTHONDONTWRITEBYTECODE environment
# would make every run recompile its ~130 modules (~0.2 CPU-s a run), which users do not pay.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def cpu_of(cmd: list[str], cwd: Path) -> float:
    """CPU seconds of a command and all the processes it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=3600,
                          env=ENV)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        sys.exit(f"{cmd[0]} failed ({proc.returncode}) in {cwd}: {proc.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def pathological(n: int = 50, depth: int = 3) -> str:
    """``x = x.to(dev) if c else x.float()`` n times inside nested training loops, used by every rule."""
    lines = ["import torch", "import torch.nn.functional as F", "def train(model, loader, opt, dev, c):"]
    indent = "    "
    for d in range(depth):
        lines.append(f"{indent}for i{d}, (x, y) in enumerate(loader):")
        indent += "    "
    lines += [f"{indent}x = x.to(dev) if c else x.float()" for _ in range(n)]
    lines += [f"{indent}{s}" for s in (
        "model = model.to(dev) if c else model.eval()", "out = model(x)",
        "loss = F.cross_entropy(F.softmax(out, -1), y)", "total = total + loss", "loss.backward()",
        "opt.step()", "print(x.item(), x.numpy())", "torch.cuda.empty_cache()")]
    lines.append("torch.onnx.export(model, (x,), 'm.onnx')")
    return "\n".join(lines) + "\n"


def slowest_files(folder: Path, top: int = 5) -> list[tuple[float, str]]:
    config = Config()
    times = []
    for path in discover([str(folder)], config.exclude):
        start = time.process_time()
        lint_file(path, config)
        times.append((time.process_time() - start, path))
    return sorted(times, reverse=True)[:top]


def wall_of(cmd: list[str], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=3600)
        if proc.returncode not in (0, 1):
            sys.exit(f"{cmd[0]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        best = min(best, time.perf_counter() - start)
    return best


def subset(files: list[Path], target_lines: int, dest: Path) -> int:
    """Copy whole files (every 7th, for variety) until about target_lines lines."""
    total = 0
    for i, f in enumerate(files[::7]):
        if total >= target_lines:
            break
        shutil.copy(f, dest / f"{i:04d}_{f.name}")
        total += f.read_bytes().count(b"\n")
    return total


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--projects", help="comma-separated project folders of the corpus (default: all)")
    ap.add_argument("--skip-ruff", action="store_true")
    ap.add_argument("--skip-torchfix", action="store_true")
    args = ap.parse_args()
    folder = corpus_dir()
    projects = sorted(p for p in folder.iterdir() if p.is_dir() and p.name != "dl")
    if args.projects:
        projects = [p for p in projects if p.name in args.projects.split(",")]
    lines = count_lines([f for p in projects for f in python_files(p)])
    print(f"corpus: {len(projects)} projects, {lines:,} lines of .py")

    torchpact = [str(BIN / "torchpact"), "lint", "--format", "json", "-o", os.devnull, "."]
    ruff = [str(BIN / "ruff"), "check", "--select", "ALL", "--no-cache", "--quiet", "--exit-zero", "--isolated", "."]
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        # a copy per project, so the cache goes to a scratch folder and never into the corpus
        copies = []
        for p in projects:
            dest = Path(tmp) / p.name
            shutil.copytree(p, dest, ignore=shutil.ignore_patterns(".torchpact_cache"))
            copies.append(dest)
        warmup = Path(tmp) / "warmup"
        warmup.mkdir()
        (warmup / "a.py").write_text("import torch\n")
        cpu_of(torchpact + ["--no-cache"], warmup)  # writes the bytecode, as pip does
        cold = ruff_cpu = 0.0
        for c in copies:  # alternating the two tools, so a change of load on the machine hits both
            cold += cpu_of(torchpact + ["--no-cache"], c)
            ruff_cpu += 0.0 if args.skip_ruff else cpu_of(ruff, c)
        for c in copies:
            cpu_of(torchpact, c)  # fills the cache
        warm = sum(cpu_of(torchpact, c) for c in copies)
    print(f"torchpact lint (cold)     {cold:8.2f} CPU-s  ({lines / cold:,.0f} lines/CPU-s)")
    if ruff_cpu:
        ratio = cold / ruff_cpu
        ok &= ratio <= 2
        print(f"ruff --select ALL         {ruff_cpu:8.2f} CPU-s")
        print(f"torchpact / ruff          {ratio:8.2f}x  (target <= 2x)")
    share = warm / cold
    ok &= share < 0.10
    print(f"torchpact lint (cached)   {warm:8.2f} CPU-s  = {share:.1%} of cold  (target < 10%)")

    worst = []
    for p in projects:
        worst += slowest_files(p)
    worst.sort(reverse=True)
    ok &= worst[0][0] < 1.0
    print("slowest files (target < 1 s):")
    for t, path in worst[:5]:
        print(f"  {t:6.3f} s  {path}")

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pathological.py"
        path.write_text(pathological())
        start = time.process_time()
        result = lint_file(str(path), Config())
        patho = time.process_time() - start
    budget_hit = [f for f in result.findings if f.code == "TP002"]
    ok &= patho < 1.0 and not budget_hit
    print(f"pathological file (50 re-bindings in 3 nested loops): {patho:.3f} s  (target < 1 s)"
          f"{'  BUDGET HIT' if budget_hit else ''}")
    if not args.skip_torchfix:
        with tempfile.TemporaryDirectory() as tmp:
            n = subset([f for p in projects for f in python_files(p)], 40_000, Path(tmp))
            t_tp = wall_of([str(BIN / "torchpact"), "lint", "--no-cache", "--format", "json", "-o", os.devnull, tmp])
            t_fix = wall_of([str(BIN / "torchfix"), "--select", "ALL", tmp], 1)
        speedup = t_fix / t_tp
        ok &= speedup >= 30
        print(f"subset {n:,} lines: torchpact {t_tp:.2f} s, torchfix {t_fix:.2f} s: {speedup:.1f}x  (target >= 30x)")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
