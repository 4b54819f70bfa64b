"""`make bench`: every benchmark, one after the other, each to its end, then one line per benchmark.

A bench that needs a corpus fetches it (``corpus.py``, ``realscripts/upstream.py``) or prints
"skipped: <why>" and exits 0; a failure of one bench does not stop the others. Exit 1 when any
bench failed its target or crashed. ``--quick`` runs each on a small part (one project, one
workload, two scripts...) as a smoke test of the whole chain from a fresh clone; its figures are not
the benchmarks' figures.

    .venv/bin/python bench/all.py [--quick] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name: (script, full-run arguments, --quick arguments)
BENCHES = {
    "lint_speed": ("lint_speed.py", [], ["--projects", "skorch", "--repeat", "1", "--repeat-one", "3",
                                         "--largest", "3", "--skip-torchfix"]),
    "lint_corpus": ("lint_corpus.py", [], ["--projects", "skorch"]),
    "torchfix_parity": ("torchfix_parity.py", [], []),
    "run_overhead": ("run_overhead.py", [], ["--repeat", "1", "--only", "mlp"]),
    "export_check": ("export_check.py", [], []),
    "trainscripts": ("trainscripts/run.py", [], ["manual_sgd", "single_logit_ce"]),
    "realscripts": ("realscripts/run.py", [], ["regression"]),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small part of each bench (a smoke test)")
    parser.add_argument("--only", nargs="*", choices=sorted(BENCHES), help="these benches only")
    args = parser.parse_args()
    outcomes = []
    for name, (script, full, quick) in BENCHES.items():
        if args.only and name not in args.only:
            continue
        cmd = [sys.executable, str(HERE / script), *(quick if args.quick else full)]
        print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        first = ""
        for text in proc.stdout:
            print(text, end="", flush=True)
            first = first or text.strip()
        code = proc.wait()
        seconds = time.perf_counter() - start
        if first.startswith("skipped:"):
            verdict = first
        else:
            verdict = {0: "passed"}.get(code, "FAILED its target" if code == 1 else f"CRASHED (exit code {code})")
        outcomes.append((name, verdict, seconds, code))
    print("\n== summary" + (" (--quick: smoke test, not the benchmarks' figures)" if args.quick else ""))
    for name, verdict, seconds, _ in outcomes:
        print(f"{name:16} {seconds:7.0f} s  {verdict}")
    return 1 if any(code for *_, code in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
