"""`torchpact run --nproc N`: launch through torch.distributed.run (torchrun's own machinery), one
watched script per rank, then merge every rank's findings into one report that says which ranks saw what.

A rank that crashes: torchrun's agent stops the others (SIGTERM, then SIGKILL after its grace
period) instead of leaving them blocked on the dead peer; each rank has saved its findings as it went,
so the merged report still has them, and the job exits non-zero.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from typing import Any, Iterable

from torchpact.findings import Category, Finding, Severity
from torchpact.launch.rank import LAUNCHER_PID_ENV
from torchpact.launch.single import LaunchError, RunOutcome, check_script
from torchpact.watch import Sampler
from torchpact.watch.watcher import Check

TEARDOWN_GRACE_S = 60.0  # a rank whose script has ended gets this long to exit (TORCHPACT_EXIT_GRACE)

RANK_FAILED = Check(
    code="TP004",
    category=Category.DISTRIBUTED,
    severity=Severity.ERROR,
    summary="A rank of a distributed job failed; torchpact stopped the job and says which rank and why.",
    doc="""## What it does
Reports the rank (and exit code) that ended a `torchpact run --nproc N` job, and the ranks that the
launcher then stopped. The failing rank's own error, explained where torchpact knows the cause, is
reported beside it (TP003). As a warning: a rank whose script had finished but whose process was
still alive 60 s after every rank's script had (`TORCHPACT_EXIT_GRACE`), stuck at interpreter exit;
torchpact stops it (SIGTERM, then SIGKILL of its session) instead of waiting forever.

## Why is this bad?
When one rank dies, the others block in their next collective until a timeout (30 minutes by default
for gloo and NCCL). torch.distributed.run's agent stops them at once; torchpact keeps what every rank
saw up to that point.

## How to fix
Fix the failing rank's error (see its TP003 finding and traceback).""",
)


def torchrun_args(script: str, argv: Iterable[str], *, nproc: int, nnodes: int, node_rank: int,
                  rdzv_endpoint: str | None, report_dir: str, watchers: list[str] | None,
                  sampler: Sampler, quiet: bool, module: bool = False) -> list[str]:
    args = ["--nproc-per-node", str(nproc), "--nnodes", str(nnodes), "--max-restarts", "0"]
    if nnodes == 1 and not rdzv_endpoint:
        args.append("--standalone")
    else:
        if not rdzv_endpoint:
            raise LaunchError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT")
        args += ["--node-rank", str(node_rank), "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv_endpoint]
    args += ["-m", "torchpact.launch.rank", "--report-dir", report_dir,
             "--sample-first", str(sampler.first), "--sample-every", str(sampler.every)]
    if watchers:
        args += ["--watchers", ",".join(watchers)]
    if quiet:
        args.append("--quiet")
    if module:
        return [*args, "--module", script, "--", *argv]
    return [*args, os.path.abspath(script), "--", *argv]


class Reaper:
    """Stops the ranks that linger once every local rank's script has finished (each report says so): a rank
    stuck at interpreter exit for ``grace`` seconds. Its report is complete; waiting would hang the job
    forever, as it hangs plain torchrun. A rank still running its script is never touched (stopping one rank
    makes torchrun's agent stop the others). SIGTERM to the rank's session (torch.distributed.run starts each
    rank in its own), then SIGKILL: the rank and what it started (DataLoader workers) go, no orphan is left."""

    def __init__(self, report_dir: str, ranks: int, grace: float | None = None, poll: float = 0.5) -> None:
        self.report_dir = report_dir
        self.ranks = ranks
        self.grace = grace if grace is not None else float(os.environ.get("TORCHPACT_EXIT_GRACE", TEARDOWN_GRACE_S))
        self.poll = poll
        self.stopped: dict[int, float] = {}  # rank -> seconds it lingered
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="torchpact-rank-reaper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        all_done_at: float | None = None
        while not self._done.wait(self.poll):
            finished = _finished_ranks(self.report_dir)
            if len(finished) < self.ranks:
                continue
            now = time.monotonic()
            all_done_at = all_done_at or now
            if now - all_done_at < self.grace:
                continue
            for doc in finished:
                pid = doc.get("pid")
                if doc["rank"] not in self.stopped and isinstance(pid, int) and _alive(pid) and stop_session(pid):
                    self.stopped[doc["rank"]] = now - all_done_at


def _finished_ranks(report_dir: str) -> list[dict[str, Any]]:
    out = []
    for path in glob.glob(os.path.join(report_dir, "rank-*.json")):
        try:
            with open(path, encoding="utf-8") as fh:
                doc = json.load(fh)
        except (OSError, ValueError):
            continue
        if doc.get("finished"):
            out.append(doc)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_session(pid: int, grace: float = 5.0) -> bool:
    """SIGTERM the session (process group) led by ``pid``, then SIGKILL what is left after ``grace``.
    False when there was nothing to stop."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return False
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except (ProcessLookupError, PermissionError):
            return True
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return True


def merge(rank_docs: list[dict[str, Any]]) -> list[Finding]:
    """One finding per (code, subject, place) with the ranks that saw it (``extra["ranks"]``).

    Where ranks word the same finding differently, the message kept is the one seen first in the
    run (the earliest step; then the most severe; then the lowest rank): a rank that compared only
    at the end of the run sees the consequence (parameters differ), one that compared at the step it
    began sees the cause (gradients differ)."""
    merged: dict[tuple, Finding] = {}
    ranks: dict[tuple, list[int]] = {}
    for doc in sorted(rank_docs, key=lambda d: d["rank"]):
        for data in doc.get("findings", []):
            f = Finding.from_dict(data)
            key = (f.code, f.subject, f.path, f.line)
            if key not in merged:
                merged[key] = f
                ranks[key] = []
            elif _earlier(f, merged[key]):
                merged[key] = f
            if doc["rank"] not in ranks[key]:
                ranks[key].append(doc["rank"])
    out = []
    for key, f in merged.items():
        seen = ranks[key]
        extra = dict(f.extra, ranks=seen)
        out.append(f.replace(rank=seen[0] if len(seen) == 1 else None, extra=extra))
    return out


def _earlier(a: Finding, b: Finding) -> bool:
    """Whether ``a`` was seen before ``b`` (or, at the same step, is more severe)."""
    order = {"error": 0, "warning": 1, "info": 2}
    def place(f: Finding) -> tuple:
        return (f.step if f.step is not None else float("inf"), order.get(f.severity.value, 3))
    return place(a) < place(b)


def run_distributed(script: str, argv: Iterable[str], *, nproc: int, nnodes: int = 1, node_rank: int = 0,
                    rdzv_endpoint: str | None = None, watchers: list[str] | None = None,
                    sampler: Sampler | None = None, quiet: bool = False, module: bool = False) -> RunOutcome:
    """Run ``script`` (with ``module``, a module name, as python -m runs it) on ``nproc`` local ranks (times
    ``nnodes``) under the watchers; merge the reports."""
    if nproc < 1:
        raise LaunchError("--nproc must be at least 1")
    if not module:
        check_script(script)
    else:
        _check_top_level(script)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    sampler = sampler or Sampler()
    report_dir = tempfile.mkdtemp(prefix="torchpact-ranks-")
    args = torchrun_args(script, list(argv), nproc=nproc, nnodes=nnodes, node_rank=node_rank,
                         rdzv_endpoint=rdzv_endpoint, report_dir=report_dir, watchers=watchers,
                         sampler=sampler, quiet=quiet, module=module)
    start = time.perf_counter()
    failures: dict[int, Any] = {}
    exit_code = 0
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())  # each rank dies with this process (rank.die_with_launcher)
    reaper = Reaper(report_dir, ranks=nproc)
    reaper.start()
    try:
        run(parse_args(args))
    except ChildFailedError as exc:
        failures = dict(exc.failures)
    except KeyboardInterrupt:
        exit_code = 130
    except SignalException as exc:  # SIGTERM / SIGHUP to the launcher: torchrun's agent stopped the ranks
        exit_code = 128 + int(exc.sigval)
    except SystemExit as exc:  # torchrun exits on bad arguments
        exit_code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.environ.pop(LAUNCHER_PID_ENV, None)
        reaper.stop()
    failures = {r: f for r, f in failures.items() if r not in reaper.stopped}
    docs = []
    for path in sorted(glob.glob(os.path.join(report_dir, "rank-*.json"))):
        try:
            with open(path, encoding="utf-8") as fh:
                docs.append(json.load(fh))
        except (OSError, json.JSONDecodeError):
            continue  # a rank killed mid-write; its previous save was replaced atomically
    shutil.rmtree(report_dir, ignore_errors=True)
    findings = merge(docs)
    seen_ranks = {d["rank"] for d in docs}
    first_failure = min(failures.items(), key=lambda kv: kv[1].timestamp) if failures else None
    if first_failure is not None:
        rank, failure = first_failure
        code = failure.exitcode
        exit_code = 128 - code if code < 0 else (code or 1)  # killed by signal N: 128 + N, as a shell shows it
        stopped = sorted(d["rank"] for d in docs if d.get("exit_code") in (143, None) and d["rank"] != rank)
        how = f"exit code {code}" if code >= 0 else f"signal {-code}"
        message = f"rank {rank} failed ({how}); the launcher stopped the other ranks"
        if stopped:
            message += f" ({', '.join(map(str, stopped))})"
        findings.append(Finding(code=RANK_FAILED.code, category=RANK_FAILED.category,
                                severity=RANK_FAILED.severity, message=message, rank=rank,
                                fix="see rank %d's error (TP003) and its traceback above" % rank,
                                extra={"ranks": [rank]}))
    for r, seconds in sorted(reaper.stopped.items()):
        findings.append(Finding(
            code=RANK_FAILED.code, category=RANK_FAILED.category, severity=Severity.WARNING, rank=r,
            message=f"rank {r} finished its script but its process had not exited {seconds:.0f} s after every rank "
                    "had (stuck at "
                    "interpreter exit, e.g. a process group or a non-daemon thread still alive); torchpact stopped it",
            fix="call dist.destroy_process_group() after the last collective, and let every thread end (daemon=True)",
            extra={"ranks": [r]}))
    missing = sorted(set(range(nproc * nnodes)) - seen_ranks) if nnodes == 1 else []
    for r in missing:
        findings.append(Finding(code=RANK_FAILED.code, category=RANK_FAILED.category, severity=Severity.WARNING,
                                message=f"rank {r} left no report: it was killed before the script started",
                                rank=r))
    steps = max((d.get("steps", 0) for d in docs), default=0)
    import torch

    outcome = RunOutcome(script=f"-m {script}" if module else script, exit_code=exit_code, findings=findings,
                         seconds=time.perf_counter() - start, steps=steps, torch=torch.__version__)
    outcome.error = "; ".join(f"rank {d['rank']}: {d['error']}" for d in docs if d.get("error")) or None
    outcome.ranks = [{k: d.get(k) for k in ("rank", "exit_code", "steps", "seconds", "error", "finished")}
                     | {"step_time_median": _median(d.get("step_times") or []),
                        "step_times": _thin(d.get("step_times") or [])}
                     for d in sorted(docs, key=lambda d: d["rank"])]
    first = min(docs, key=lambda d: d["rank"], default=None)
    outcome.data = (first or {}).get("data") or {}  # the lowest rank's series stand for the job's
    return outcome


def _check_top_level(name: str) -> None:
    """A :class:`LaunchError` now, rather than one per rank, when the top-level package of ``-m name`` is
    nowhere to be found (from the working directory, as python -m looks); looked for without importing it."""
    import importlib.util
    import sys

    top = name.split(".")[0]
    if not top.isidentifier():
        raise LaunchError(f"-m needs a module name such as package.module, not {name!r}")
    saved = sys.path[:]
    sys.path.insert(0, os.getcwd())
    try:
        found = importlib.util.find_spec(top) is not None
    finally:
        sys.path[:] = saved
    if not found:
        raise LaunchError(f"no module named {top}")


def _thin(xs: list[float], limit: int = 512) -> list[tuple[int, float]]:
    """(step, seconds) pairs, at most about ``limit`` of them, for plots."""
    stride = max(1, -(-len(xs) // limit))
    return [(i, round(x, 6)) for i, x in enumerate(xs) if i % stride == 0 or i == len(xs) - 1]


def _median(xs: list[float]) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return round(s[len(s) // 2], 6)
