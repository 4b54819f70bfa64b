"""Shared runner of the real-bug benches (``bench/realbugs``, ``bench/realbugs2``).

Each case is one script in the bench's ``cases/`` that runs as ``buggy`` or ``fixed``. The runner
runs both under ``torchpact run --format json`` and counts the case *detected* when the buggy run
reports a finding whose code is one of the case's ``codes``; the fixed run must report no warning
or error. A code written ``new:<name>`` is one no torchpact check has yet: it can never match, so
such a case counts as missed until a check exists and the case names its real code.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Case:
    name: str
    cause: str               # the cause, in a few words
    codes: tuple[str, ...]   # findings that name that cause ("new:<name>": no check has it yet)
    nproc: int = 1
    source: str = ""         # the public report the case reproduces


def run_case(case: Case, mode: str, cases_dir: Path, timeout: int = 600) -> tuple[list[dict], float, str]:
    report = Path(tempfile.mkdtemp(prefix="realbugs-")) / "report.json"
    cmd = [sys.executable, "-m", "torchpact", "run", "--quiet", "--format", "json", "--output", str(report)]
    if case.nproc > 1:
        cmd += ["--nproc", str(case.nproc)]
    cmd += [str(cases_dir / f"{case.name}.py"), mode]
    start = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cases_dir.parent, check=False)
    except subprocess.TimeoutExpired:
        return [], time.perf_counter() - start, "timed out"
    elapsed = time.perf_counter() - start
    try:
        return json.loads(report.read_text())["findings"], elapsed, ""
    except (OSError, ValueError, KeyError):
        return [], elapsed, (out.stderr.strip().splitlines() or ["no report"])[-1]
    finally:
        shutil.rmtree(report.parent, ignore_errors=True)


def _brief(findings: list[dict]) -> list[dict]:
    return [{"code": f["code"], "severity": f["severity"], "message": f["message"]} for f in findings]


def evaluate(case: Case, cases_dir: Path) -> dict:
    """Runs one case buggy and fixed; returns its result row."""
    buggy, t_bug, err_bug = run_case(case, "buggy", cases_dir)
    fixed, t_fix, err_fix = run_case(case, "fixed", cases_dir)
    hits = [f for f in buggy if f["code"] in case.codes]
    noise = [f for f in fixed if f["severity"] in ("warning", "error")]
    return {
        "case": case.name, "cause": case.cause, "codes": list(case.codes), "source": case.source,
        "detected": bool(hits), "fixed_silent": not noise and not err_fix,
        "finding": hits[0] if hits else None, "buggy_codes": sorted({f["code"] for f in buggy}),
        "fixed_noise": noise, "buggy_findings": _brief(buggy), "fixed_findings": _brief(fixed),
        "seconds": round(t_bug + t_fix, 1), "errors": [e for e in (err_bug, err_fix) if e]}


def main(cases: Sequence[Case], cases_dir: Path, description: str, argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("cases", nargs="*", help="case names (default: all)")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    unknown = set(args.cases) - {c.name for c in cases}
    if unknown:
        parser.error(f"no such case: {', '.join(sorted(unknown))}")
    selected = [c for c in cases if not args.cases or c.name in args.cases]
    results = []
    for case in selected:
        r = evaluate(case, cases_dir)
        results.append(r)
        status = "DETECTED" if r["detected"] else "missed  "
        noise = [f["code"] for f in r["fixed_noise"]]
        clean = "fixed silent" if r["fixed_silent"] else f"fixed NOISY {noise} {r['errors']}"
        print(f"{status} {case.name:26} {clean:14} {r['seconds']:6.1f}s  buggy: {', '.join(r['buggy_codes']) or '-'}"
              f"  (named by {', '.join(case.codes)})")
        if r["finding"]:
            print(f"         {r['finding']['code']} {r['finding']['message']}")
        sys.stdout.flush()
    detected = sum(r["detected"] for r in results)
    silent = sum(r["fixed_silent"] for r in results)
    print(f"\n{detected}/{len(results)} detected by a finding that names the cause; "
          f"{silent}/{len(results)} fixed versions silent (no warning or error)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if detected == len(results) and silent == len(results) else 1
