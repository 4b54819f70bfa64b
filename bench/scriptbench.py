"""Shared runner of the script benches (``bench/trainscripts``, ``bench/realscripts``): each row runs
one training script under ``torchpact run --format json`` and must end with no warning and no
error, except the codes a row expects on purpose (a bug kept in the script), which must be there.

A bench module lists its rows and calls :func:`main`; ``prepare`` (optional) gives each row its
working folder, script path and extra environment, so a bench can copy files or write data first.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Script:
    name: str                          # the row's name, as given on the command line
    file: str                          # the script, relative to the bench's folder of scripts
    args: tuple[str, ...] = ()
    expected: tuple[str, ...] = ()     # codes of a bug kept on purpose: must be reported, and nothing else
    nproc: int = 1
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Setup:
    """Where and how one row runs."""
    cwd: Path
    script: Path
    env: dict[str, str]


Prepare = Callable[[Script, Path], Setup]


class Skip(Exception):
    """Raised by ``prepare`` when a row cannot run here (the message says why, in one line)."""


def run_one(script: Script, setup: Setup, report: Path, timeout: int) -> tuple[dict | None, float, str]:
    """Runs one row under `torchpact run`; returns (report, seconds, error)."""
    cmd = [sys.executable, "-m", "torchpact", "run", "--quiet", "--format", "json", "--output", str(report),
           "--fail-on", "error"]
    if script.nproc > 1:
        cmd += ["--nproc", str(script.nproc)]
    cmd += [str(setup.script), *script.args]
    # One intra-op thread a row unless the caller says otherwise: OpenMP threads spinning on a shared,
    # loaded machine made an LBFGS step of time_sequence_prediction 30x slower (past the timeout).
    env = {"OMP_NUM_THREADS": "1", **os.environ, **script.env, **setup.env}
    start = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=setup.cwd, env=env, check=False)
    except subprocess.TimeoutExpired:
        return None, time.perf_counter() - start, f"timed out after {timeout} s"
    elapsed = time.perf_counter() - start
    last = (out.stderr.strip().splitlines() or ["no report"])[-1]
    try:
        data = json.loads(report.read_text())
    except (OSError, ValueError):
        return None, elapsed, last
    if out.returncode not in (0, 1):
        return data, elapsed, f"exit code {out.returncode}: {last}"
    return data, elapsed, ""


def in_place(folder: Path) -> Prepare:
    """Rows run the scripts where they are, each from a temporary working folder."""
    def prepare(script: Script, workdir: Path) -> Setup:
        return Setup(workdir, folder / script.file, {})
    return prepare


def evaluate(script: Script, prepare: Prepare, timeout: int) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"{script.name}-") as tmp:
        workdir = Path(tmp)
        try:
            setup = prepare(script, workdir)
        except Skip as exc:
            return {"script": script.name, "steps": "-", "seconds": 0.0, "error": "", "findings": [], "missed": [],
                    "ok": True, "skipped": str(exc)}
        except (OSError, ValueError, subprocess.CalledProcessError) as exc:
            return {"script": script.name, "steps": "?", "seconds": 0.0, "error": f"set-up failed: {exc}",
                    "findings": [], "ok": False}
        report, seconds, err = run_one(script, setup, workdir / "torchpact-report.json", timeout)
    findings = report["findings"] if report else []
    alarms = [f for f in findings if f["severity"] in ("warning", "error") and f["code"] not in script.expected]
    missed = [c for c in script.expected if not any(f["code"] == c for f in findings)]
    return {"script": script.name, "steps": (report or {}).get("summary", {}).get("steps", "?"),
            "seconds": round(seconds, 1), "error": err, "findings": findings, "missed": missed,
            "ok": not (alarms or missed or err), "skipped": ""}


def _note(script: Script, row: dict) -> str:
    if row["error"]:
        return row["error"]
    if row["skipped"]:
        return f"skipped: {row['skipped']}"
    if script.expected:
        return f"expected {', '.join(script.expected)}: " + ("MISSED" if row["missed"] else "found")
    return ""


def count(findings: list[dict], severity: str) -> int:
    return sum(f["severity"] == severity for f in findings)


def main(scripts: Sequence[Script], prepare: Prepare, description: str, argv: list[str] | None = None,
         timeout: int = 900, ready: Callable[[], None] | None = None) -> int:
    """Runs the rows named on the command line (default: all); exit 1 when any is not as expected.

    ``ready`` runs once before any row; when it raises Skip, the bench prints one line and exits 0."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("scripts", nargs="*", metavar="SCRIPT", help="row names (default: all)")
    parser.add_argument("--json", help="write the reports to this file")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every finding")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="rows run at the same time (default: 1)")
    args = parser.parse_args(argv)
    unknown = set(args.scripts) - {s.name for s in scripts}
    if unknown:
        parser.error(f"no such script: {', '.join(sorted(unknown))} (known: {', '.join(s.name for s in scripts)})")
    selected = [s for s in scripts if not args.scripts or s.name in args.scripts]
    if ready is not None:
        try:
            ready()
        except Skip as exc:
            print(f"skipped: {exc}")
            return 0
    rows = []
    print(f"{'script':34} {'steps':>6} {'error':>6} {'warn':>5} {'info':>5} {'sec':>6}")
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(evaluate, s, prepare, timeout): s for s in selected}
        for future in as_completed(futures):  # a row as each run ends
            script, row = futures[future], future.result()
            f = row["findings"]
            note = _note(script, row)
            print(f"{script.name:34} {row['steps']!s:>6} {count(f, 'error'):>6} {count(f, 'warning'):>5} "
                  f"{count(f, 'info'):>5} {row['seconds']:>6.1f}" + (f"  {note}" if note else ""), flush=True)
            if args.verbose:
                for finding in f:
                    print(f"    {finding['severity']:7} {finding['code']} {finding.get('path')}:{finding.get('line')} "
                          f"{finding['message']}")
            rows.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    ran = [r for r in rows if not r["skipped"]]
    good = sum(r["ok"] for r in ran)
    kept = sum(bool(s.expected) for s in selected if any(r["script"] == s.name for r in ran))
    skipped = f"; {len(rows) - len(ran)} skipped" if len(ran) < len(rows) else ""
    print(f"{good}/{len(ran)} as expected (of {len(ran) - kept} correct scripts, each must get no warning or error, "
          f"and {kept} with a bug kept on purpose, which must get its finding and no other){skipped}")
    return 0 if good == len(ran) else 1
