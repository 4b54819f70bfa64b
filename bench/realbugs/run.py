"""Real silent bugs, reproduced on CPU: does `torchpact run` name their cause, and stay quiet on the fix?

The cases adapt the CPU-reproducible bugs of the TrainCheck benchmark (OSDI'25,
OrderLab/TrainCheck-Evaluation-Workloads, silent-issue-detection) to small, synthetic-data scripts
in ``cases/``; each keeps the bug and runs as ``buggy`` or ``fixed``. A case is *detected* when the
buggy run reports one of the codes that name its cause; its fixed run must report no warning or
error.

    .venv/bin/python bench/realbugs/run.py [CASE ...] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Case:
    name: str
    cause: str               # the cause, in a few words
    codes: tuple[str, ...]   # findings that name that cause
    nproc: int = 1


CASES = (
    Case("pytorch_forum_84911", "new head frozen with the backbone", ("TP459",)),
    Case("stackoverflow_60335387", "optimizer.zero_grad() missing", ("TP401",)),
    Case("pytorch_115607", "step no longer updates the parameters", ("TP454",)),
    Case("mmpretrain_702", "train() override with frozen_stages never ran", ("TP457",)),
    Case("transformers_17877", "init re-run over trained weights", ("TP456",)),
    Case("transformers_33844", "attention dropout on in eval mode", ("TP458",)),
    Case("stackoverflow_67180955", "same RNG state in every DataLoader worker", ("TP550",)),
    Case("pytorch_104336", "DDP model converted after wrapping: hooks lost", ("TP657",), nproc=2),
    Case("x_jxmnop_ddp_out_of_sync", "model only sometimes wrapped in DDP", ("TP602", "TP652"), nproc=2),
    Case("deepspeed_1801", "rank-local clipping desynchronises replicas", ("TP652",), nproc=2),
)


def run_case(case: Case, mode: str, timeout: int = 600) -> tuple[list[dict], float, str]:
    report = Path(tempfile.mkdtemp(prefix="realbugs-")) / "report.json"
    cmd = [sys.executable, "-m", "torchpact", "run", "--quiet", "--format", "json", "--output", str(report)]
    if case.nproc > 1:
        cmd += ["--nproc", str(case.nproc)]
    cmd += [str(HERE / "cases" / f"{case.name}.py"), mode]
    start = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=HERE)
    except subprocess.TimeoutExpired:
        return [], time.perf_counter() - start, "timed out"
    elapsed = time.perf_counter() - start
    try:
        return json.loads(report.read_text())["findings"], elapsed, ""
    except (OSError, ValueError, KeyError):
        return [], elapsed, (out.stderr.strip().splitlines() or ["no report"])[-1]
    finally:
        shutil.rmtree(report.parent, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help="case names (default: all)")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    cases = [c for c in CASES if not args.cases or c.name in args.cases]
    results = []
    for case in cases:
        buggy, t_bug, err_bug = run_case(case, "buggy")
        fixed, t_fix, err_fix = run_case(case, "fixed")
        hits = [f for f in buggy if f["code"] in case.codes]
        noise = [f for f in fixed if f["severity"] in ("warning", "error")]
        results.append({
            "case": case.name, "cause": case.cause, "detected": bool(hits), "fixed_silent": not noise and not err_fix,
            "finding": hits[0] if hits else None, "buggy_codes": sorted({f["code"] for f in buggy}),
            "fixed_noise": noise, "seconds": round(t_bug + t_fix, 1), "errors": [e for e in (err_bug, err_fix) if e]})
        r = results[-1]
        status = "DETECTED" if r["detected"] else "missed  "
        clean = "fixed silent" if r["fixed_silent"] else f"fixed NOISY {[f['code'] for f in noise]} {r['errors']}"
        print(f"{status} {case.name:26} {clean:14} {r['seconds']:6.1f}s  buggy: {', '.join(r['buggy_codes']) or '-'}")
        if hits:
            print(f"         {hits[0]['code']} {hits[0]['message']}")
        sys.stdout.flush()
    detected = sum(r["detected"] for r in results)
    silent = sum(r["fixed_silent"] for r in results)
    print(f"\n{detected}/{len(results)} detected by a finding that names the cause; "
          f"{silent}/{len(results)} fixed versions silent (no warning or error)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if detected == len(results) and silent == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
