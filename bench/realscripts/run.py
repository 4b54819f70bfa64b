"""Real, correct training scripts from pytorch/examples under `torchpact run`: any warning or error is a
false alarm (or a documented upstream bug).

Each script in this folder is an upstream example adapted to CPU and offline data (its header names
the upstream file, the commit and what changed); the arguments below keep each run to seconds.
Prints one row per script (steps seen, findings by severity) and exits 1 when any script gets a
warning or an error (beyond the finding of a documented upstream bug), or does not finish.

    .venv/bin/python bench/realscripts/run.py [SCRIPT ...] [--json FILE] [-v]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Script:
    name: str          # the row's name
    file: str          # the script in this folder
    args: tuple[str, ...] = ()
    upstream_bug: tuple[str, ...] = ()  # codes naming a real bug of the upstream example, kept on purpose


SCRIPTS = (
    Script("regression", "regression.py"),
    Script("mnist", "mnist.py", ("--epochs", "1", "--batch-size", "32", "--test-batch-size", "64")),
    Script("mnist_rnn", "mnist_rnn.py", ("--epochs", "1", "--batch-size", "32", "--test-batch-size", "64")),
    Script("mnist_forward_forward", "mnist_forward_forward.py",
           ("--epochs", "20", "--train_size", "512", "--test_size", "128")),
    Script("vae", "vae.py", ("--epochs", "1", "--batch-size", "32")),
    Script("dcgan", "dcgan.py", ("--dataset", "fake", "--niter", "1", "--batchSize", "32", "--workers", "0",
                                 "--ngf", "16", "--ndf", "16")),
    Script("time_sequence_prediction", "time_sequence_prediction.py", ("--steps", "1",)),
    Script("reinforce", "reinforce.py"),
    Script("actor_critic", "actor_critic.py"),
    Script("word_language_model_lstm", "word_language_model.py",
           ("--data", "wikitext-synthetic", "--epochs", "2", "--emsize", "64", "--nhid", "64", "--log-interval", "20")),
    Script("word_language_model_transformer", "word_language_model.py",
           ("--data", "wikitext-synthetic", "--model", "Transformer", "--use-optimizer", "--lr", "0.001",
            "--epochs", "2", "--emsize", "64", "--nhid", "64", "--log-interval", "20")),
    Script("word_language_model_gru_tied", "word_language_model.py",
           ("--data", "wikitext-synthetic", "--model", "GRU", "--tied", "--use-optimizer", "--lr", "0.001",
            "--epochs", "2", "--emsize", "64", "--nhid", "64", "--log-interval", "20")),
    Script("super_resolution", "super_resolution.py",
           ("--upscale_factor", "3", "--batchSize", "4", "--testBatchSize", "4", "--nEpochs", "2", "--threads", "0")),
    Script("gcn", "gcn.py", ("--epochs", "40", "--val-every", "10")),
    Script("gat", "gat.py", ("--epochs", "20", "--val-every", "10")),
    # Upstream bug, kept: F.cross_entropy over the single output of nn.Linear(20, 1) is exactly 0 for
    # any input (log_softmax of one logit is 0), so every gradient is 0 and the model never learns.
    Script("ddp_tutorial_single_gpu", "ddp_tutorial_single_gpu.py", ("2", "5", "--batch_size", "128"),
           upstream_bug=("TP252",)),
)


def run_script(script: Script, workdir: Path, timeout: int = 600) -> tuple[dict | None, float, str]:
    """Runs one script under `torchpact run --format json` in ``workdir``; returns (report, seconds, error)."""
    report_file = workdir / "torchpact-report.json"  # the scripts print to stdout themselves
    cmd = [sys.executable, "-m", "torchpact", "run", "--quiet", "--format", "json", "--output", str(report_file),
           "--fail-on", "error", str(HERE / script.file), *script.args]
    start = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=workdir)
    except subprocess.TimeoutExpired:
        return None, time.perf_counter() - start, "timed out"
    elapsed = time.perf_counter() - start
    try:
        report = json.loads(report_file.read_text())
    except (OSError, ValueError):
        return None, elapsed, (out.stderr.strip().splitlines() or ["no report"])[-1]
    if out.returncode not in (0, 1):
        return report, elapsed, f"exit code {out.returncode}: " + (out.stderr.strip().splitlines() or [""])[-1]
    return report, elapsed, ""


def run_in_tempdir(script: Script) -> tuple[dict | None, float, str]:
    with tempfile.TemporaryDirectory(prefix="realscript-") as tmp:
        return run_script(script, Path(tmp))


def count(findings: list[dict], severity: str) -> int:
    return sum(f["severity"] == severity for f in findings)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scripts", nargs="*", help="script names (default: all)")
    parser.add_argument("--json", help="write the reports to this file")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every finding")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="scripts run at the same time (default: 1)")
    args = parser.parse_args(argv)
    scripts = [s for s in SCRIPTS if not args.scripts or s.name in args.scripts]
    rows, bad = [], 0
    print(f"{'script':34} {'steps':>6} {'error':>6} {'warn':>5} {'info':>5} {'sec':>6}")
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_in_tempdir, s): s for s in scripts}
        for future in as_completed(futures):  # a row as each run ends
            script = futures[future]
            report, seconds, err = future.result()
            findings = report["findings"] if report else []
            steps = (report or {}).get("summary", {}).get("steps", "?")
            alarms = [f for f in findings if f["severity"] in ("warning", "error") and f["code"] not in script.upstream_bug]
            missed = [c for c in script.upstream_bug if not any(f["code"] == c for f in findings)]
            e, w, i = count(findings, "error"), count(findings, "warning"), count(findings, "info")
            bad += bool(alarms or missed or err)
            note = err or (f"upstream bug: {', '.join(script.upstream_bug)} " + ("missed" if missed else "found")
                           if script.upstream_bug else "")
            print(f"{script.name:34} {steps!s:>6} {e:>6} {w:>5} {i:>5} {seconds:>6.1f}" + (f"  {note}" if note else ""), flush=True)
            if args.verbose:
                for f in findings:
                    print(f"    {f['severity']:7} {f['code']} {f.get('path')}:{f.get('line')} {f['message']}")
            rows.append({"script": script.name, "steps": steps, "seconds": round(seconds, 1), "error": err,
                         "findings": findings})
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    clean = [s for s in scripts if not s.upstream_bug]
    print(f"{len(scripts) - bad}/{len(scripts)} as expected ({len(clean)} correct scripts: no warning or error; "
          f"{len(scripts) - len(clean)} upstream bug: its finding and nothing else)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
