"""Speed of `torchpact lint` against ruff, in CPU seconds (user + system of every process of a run, pool
workers included), so the figures hold on a shared machine where wall time depends on the neighbours.

Every comparison runs both tools the same number of times (``--repeat``), alternating them, and
compares the median of each. Both run from the same folder with that project's own configuration:
torchpact with its defaults (every rule) and the closest pyproject.toml, ruff with ``--select ALL``
and the project's ruff settings (its exclusions, per-file ignores...; no ``--isolated``).

Targets (issue 30):
- one file (a 2-line torch file, linted alone, as a pre-commit hook or an editor does): <= 0.1 CPU-s;
- the whole corpus, cold (``--no-cache`` for both), each project linted from its own folder:
  at most 2x ruff's CPU time;
- a cached re-lint of the unchanged corpus: under 10% of torchpact's cold run;
- no rule runs out of its budget (TP002) on the largest files nor on two ordinary 10k-line files
  (the largest torch files joined; a notebook-style script), the slowest file under 1 s, and a
  generated pathological file (one name re-bound many times in nested loops) under 1 s;
- a ~40k-line subset: at least 30x less CPU than ``torchfix --select ALL``.

The default projects are the TUNING part of the corpus (``bench/lint_split.py``): the figures are
in-sample, the code having been tuned on those projects.

Usage: python bench/lint_speed.py [--projects a,b] [--repeat N] [--repeat-one N] [--skip-torchfix]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from corpus import corpus_dir, count_lines, python_files
from lint_split import TUNING

from torchpact.config import Config
from torchpact.lint import registry
from torchpact.lint.engine import lint_file
from torchpact.lint.files import discover

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]

# As installed by pip, torchpact runs from compiled bytecode; a PYTHONDONTWRITEBYTECODE environment
# would make every run recompile its modules (~0.1 CPU-s a run), which users do not pay.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

TORCHPACT = [str(BIN / "torchpact"), "lint", "--format", "json", "-o", os.devnull]
RUFF = [str(BIN / "ruff"), "check", "--select", "ALL", "--quiet", "--exit-zero"]
NO_CACHE = {"torchpact": ["--no-cache"], "ruff": ["--no-cache"]}
ONE_FILE = "import torch\nx = torch.zeros(3)\n"


def cpu_of(cmd: list[str], cwd: Path) -> float:
    """CPU seconds of a command and of every process it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=3600, env=ENV)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        sys.exit(f"{Path(cmd[0]).name} failed ({proc.returncode}) in {cwd}: {proc.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def compare(commands: dict[str, list[str]], folders: list[Path], repeat: int,
            target: str = ".") -> dict[str, list[float]]:
    """Each command's CPU seconds summed over ``folders`` (run from each, on ``target``), ``repeat``
    times; the commands alternate on every folder, so a change of load hits all of them."""
    totals: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeat):
        run = Counter[str]()
        for folder in folders:
            for name, cmd in commands.items():
                run[name] += cpu_of([*cmd, target], folder)
        for name in commands:
            totals[name].append(run[name])
    return totals


def median(values: list[float]) -> float:
    return statistics.median(values)


def line(label: str, runs: dict[str, list[float]], target: str = "") -> float:
    """Print torchpact's and ruff's medians and their ratio; returns the ratio."""
    tp, ruff = median(runs["torchpact"]), median(runs["ruff"])
    n = len(runs["torchpact"])
    print(f"{label:28s} torchpact {tp:8.3f} CPU-s   ruff {ruff:8.3f} CPU-s   "
          f"ratio {tp / ruff:6.2f}x  (median of {n} each){target}")
    return tp / ruff


def slowest_files(folder: Path, top: int = 5) -> list[tuple[float, str]]:
    config = Config()
    times = []
    for path in discover([str(folder)], config.exclude):
        start = time.process_time()
        lint_file(path, config)
        times.append((time.process_time() - start, path))
    return sorted(times, reverse=True)[:top]


def rule_times(path: str) -> tuple[Counter[str], list[str]]:
    """CPU seconds each rule's check took on one file (every rule enabled), and the file's TP002
    messages (a rule that failed or ran out of its budget)."""
    spent = Counter[str]()
    make = registry.RuleSpec.__call__

    def timed_rule(spec):
        rule = make(spec)
        check = rule.check

        def timed(node, ctx):
            start = time.process_time()
            try:
                for hit in check(node, ctx):
                    spent[spec.code] += time.process_time() - start
                    yield hit
                    start = time.process_time()
            finally:
                spent[spec.code] += time.process_time() - start

        rule.check = timed
        return rule

    registry.RuleSpec.__call__ = timed_rule
    try:
        result = lint_file(path, Config())
    finally:
        registry.RuleSpec.__call__ = make
    return spent, [f.message for f in result.findings if f.code == "TP002"]


def largest_files(projects: list[Path], top: int) -> list[Path]:
    return sorted((f for p in projects for f in python_files(p)), key=lambda f: f.stat().st_size, reverse=True)[:top]


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


TRAINING_BLOCK = """
model = Net().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
total = 0
for epoch in range(epochs):
    model.train()
    for i, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
        if i % 100 == 0:
            print(epoch, i, loss.item())
    model.eval()
    with torch.no_grad():
        acc = sum((model(x).argmax(1) == y).float().mean().item() for x, y in val_loader)
    history.append(acc)
torch.save(model.state_dict(), "m.pt")
"""


def ten_thousand_lines(projects: list[Path]) -> dict[str, str]:
    """Two ordinary files of 10k+ lines: the largest files of the corpus that import torch, joined
    (the corpus has no 10k-line file), and a notebook-style script whose module level trains, evaluates
    and saves a model again and again, re-binding the same names."""
    joined, n = [], 0
    for f in largest_files(projects, 200):
        text = f.read_text(encoding="utf-8", errors="replace")
        if "import torch" in text:
            joined.append(text)
            n += text.count("\n")
            if n >= 10_000:
                break
    script = "import torch\nimport torch.nn.functional as F\nhistory = []\n"
    script += TRAINING_BLOCK * (10_000 // TRAINING_BLOCK.count("\n") + 1)
    return {"largest torch files joined": "\n".join(joined), "module-level training script": script}


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
    ap.add_argument("--projects", help="comma-separated project folders of the corpus (default: the TUNING ones)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each tool on the corpus, cold and cached")
    ap.add_argument("--repeat-one", type=int, default=21, help="runs of each tool on one file")
    ap.add_argument("--largest", type=int, default=20, help="largest files whose rules' times are shown")
    ap.add_argument("--skip-torchfix", action="store_true")
    args = ap.parse_args()
    folder = corpus_dir()
    names = args.projects.split(",") if args.projects else list(TUNING)
    projects = [folder / n for n in names if (folder / n).is_dir()]
    if not projects:
        sys.exit(f"none of the projects {', '.join(names)} is in {folder}")
    lines = count_lines([f for p in projects for f in python_files(p)])
    print(f"corpus: {len(projects)} projects ({'TUNING, in-sample' if not args.projects else 'as named'}), "
          f"{lines:,} lines of .py; CPU seconds of the whole run, median of the runs")
    ok = True
    cold = {"torchpact": TORCHPACT + NO_CACHE["torchpact"], "ruff": RUFF + NO_CACHE["ruff"]}
    warm = {"torchpact": TORCHPACT, "ruff": RUFF}
    with tempfile.TemporaryDirectory() as tmp:
        one = Path(tmp) / "one"
        one.mkdir()
        (one / "one.py").write_text(ONE_FILE)
        cpu_of([*cold["torchpact"], "one.py"], one)  # writes torchpact's bytecode, as pip does
        one_runs = compare(cold, [one], args.repeat_one, "one.py")
        line("one 2-line file, no cache", one_runs, "  (target: torchpact <= 0.1 CPU-s)")
        ok &= median(one_runs["torchpact"]) <= 0.1

        # a copy per project: both tools' caches go to a scratch folder, never into the corpus
        copies = []
        for p in projects:
            dest = Path(tmp) / p.name
            shutil.copytree(p, dest, ignore=shutil.ignore_patterns(".torchpact_cache", ".ruff_cache"))
            copies.append(dest)
        cold_runs = compare(cold, copies, args.repeat)
        ratio = line("corpus, cold", cold_runs, "  (target <= 2x)")
        ok &= ratio <= 2
        compare(warm, copies, 1)  # fills both caches
        cached_runs = compare(warm, copies, args.repeat)
        line("corpus, cached re-lint", cached_runs)
        share = median(cached_runs["torchpact"]) / median(cold_runs["torchpact"])
        ok &= share < 0.10
        print(f"{'':28s} torchpact cached = {share:.1%} of its cold run  (target < 10%)")

    print(f"largest {args.largest} files, and two of 10k lines, every rule, in-process (rule budget 1 CPU-s):")
    budget_hit = False
    for path in largest_files(projects, args.largest):
        start = time.process_time()
        spent, internal = rule_times(str(path))
        total = time.process_time() - start
        code, worst = spent.most_common(1)[0] if spent else ("-", 0.0)
        n = path.read_bytes().count(b"\n")
        budget_hit |= bool(internal)
        print(f"  {total:6.3f} s  {n:6,d} lines  slowest rule {code} {worst:.3f} s  {path.relative_to(folder)}"
              + (f"  TP002: {internal[0]}" if internal else ""))

    with tempfile.TemporaryDirectory() as tmp:
        for label, text in ten_thousand_lines(projects).items():
            path = Path(tmp) / "big.py"
            path.write_text(text)
            start = time.process_time()
            spent, internal = rule_times(str(path))
            total = time.process_time() - start
            code, slowest = spent.most_common(1)[0]
            budget_hit |= bool(internal)
            print(f"  {total:6.3f} s  {text.count(chr(10)):6,d} lines  slowest rule {code} {slowest:.3f} s  {label}"
                  + (f"  TP002: {internal[0]}" if internal else ""))
    ok &= not budget_hit

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
    hit = [f for f in result.findings if f.code == "TP002"]
    ok &= patho < 1.0 and not hit
    print(f"pathological file (50 re-bindings in 3 nested loops): {patho:.3f} s  (target < 1 s)"
          f"{'  BUDGET HIT' if hit else ''}")

    if not args.skip_torchfix:
        with tempfile.TemporaryDirectory() as tmp:
            n = subset([f for p in projects for f in python_files(p)], 40_000, Path(tmp))
            runs = {"torchpact": [], "torchfix": []}
            for _ in range(args.repeat):
                runs["torchpact"].append(cpu_of([*cold["torchpact"], tmp], ROOT))
                runs["torchfix"].append(cpu_of([str(BIN / "torchfix"), "--select", "ALL", tmp], ROOT))
        tp, fix = median(runs["torchpact"]), median(runs["torchfix"])
        ok &= fix / tp >= 30
        print(f"subset {n:,} lines: torchpact {tp:.2f} CPU-s, torchfix {fix:.2f} CPU-s (median of "
              f"{args.repeat} each): {fix / tp:.1f}x less  (target >= 30x)")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
