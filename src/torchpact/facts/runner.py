"""Runs facts in parallel, each in its own process with a time limit.

One fork server (``python -m torchpact.facts.run_one --serve``) imports torch once and forks a fresh
child per fact (see :mod:`torchpact.facts.run_one` for why); this module keeps ``jobs`` of them
running at a time (one per core by default). A fact whose child fails, writes no result or outlives
its time limit is reported as ``failed`` / ``timed out`` with the tail of its stderr as the
evidence, and the others go on. A time-out ends the child's whole process group (the ranks of a
distributed experiment too).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from torchpact.facts import FAILED, TIMED_OUT, VERDICTS, Fact, how_it_ended

STDERR_TAIL_LINES = 12
SERVER_START_TIMEOUT_S = 120.0
# DDP, torch.compile and torch.export all import torch._dynamo (seconds of CPU): when several facts
# will, the server imports it once before forking.
PRELOAD = {"torch._dynamo": ("distributed", "export", "compile")}


@dataclass(frozen=True)
class Outcome:
    """What running one fact gave on this machine."""

    fact: Fact
    verdict: str  # one of VERDICTS, or needs CUDA / needs several GPUs / failed / timed out
    evidence: str
    seconds: float
    torch: str | None = None

    @property
    def changed(self) -> bool:
        """The experiment ran and its verdict differs from the one on the supported torch."""
        return self.verdict in VERDICTS and self.verdict != self.fact.expected

    def as_dict(self) -> dict:
        f = self.fact
        return {"id": f.id, "area": f.area, "claim": f.claim, "requires": f.requires, "verdict": self.verdict,
                "expected": f.expected, "changed": self.changed, "evidence": self.evidence,
                "seconds": self.seconds, "torch": self.torch}


class RunnerError(RuntimeError):
    """The fork server could not be started."""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])  # torchpact importable even when not installed
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _tail(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines[-STDERR_TAIL_LINES:])


def _kill_group(pid: int) -> None:
    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        try:
            kill(target, signal.SIGKILL)
            return
        except (ProcessLookupError, PermissionError):
            continue


class _Server:
    """The fork server process and its line protocol."""

    def __init__(self, folder: str, preload: list[str]):
        with open(os.path.join(folder, "server.err"), "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "torchpact.facts.run_one", "--serve", folder, *preload],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=_env())
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.proc.stdout, selectors.EVENT_READ)
        self.buffer = b""
        self.closed = False

    def send(self, module: str) -> None:
        self.proc.stdin.write(module.encode() + b"\n")
        self.proc.stdin.flush()

    def lines(self, timeout: float | None) -> list[str]:
        """Protocol lines available within ``timeout``; sets ``closed`` when the server is gone."""
        if "\n" not in self.buffer.decode(errors="replace") and not self.closed:
            if self.selector.select(timeout):
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    self.closed = True
                self.buffer += chunk
        *complete, self.buffer = self.buffer.split(b"\n")
        return [line.decode() for line in complete]

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.selector.close()
        self.proc.stdout.close()


def run_facts(facts: Iterable[Fact], jobs: int | None = None, timeout_s: float | None = None,
              on_outcome: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Run ``facts``, ``jobs`` at a time; the outcomes in the order of ``facts``."""
    facts = list(facts)
    if not facts:
        return []
    jobs = max(1, jobs or os.cpu_count() or 1)
    by_module = {f.module: f for f in facts}
    # Longest first (their time limit says which), so that short ones fill the gaps at the end.
    queue = sorted(facts, key=lambda f: -f.timeout_s)
    outcomes: dict[str, Outcome] = {}
    running: dict[str, tuple[int | None, float]] = {}  # module -> (pid once started, start time)

    def finish(outcome: Outcome) -> None:
        outcomes[outcome.fact.module] = outcome
        running.pop(outcome.fact.module, None)
        if on_outcome is not None:
            on_outcome(outcome)

    def limit(fact: Fact) -> float:
        return timeout_s if timeout_s is not None else fact.timeout_s

    with tempfile.TemporaryDirectory(prefix="torchpact-facts-") as folder:
        preload = [m for m, areas in PRELOAD.items() if sum(f.area in areas for f in facts) >= 2]
        server = _Server(folder, preload)
        try:
            ready = time.monotonic() + SERVER_START_TIMEOUT_S
            while "ready" not in server.lines(max(0.0, ready - time.monotonic())):
                if server.closed or time.monotonic() > ready:
                    raise RunnerError("the fact server did not start:\n" + _tail(Path(folder) / "server.err"))
            while queue or running:
                while queue and len(running) < jobs and not server.closed:
                    fact = queue.pop(0)
                    running[fact.module] = (None, time.monotonic())
                    server.send(fact.module)
                now = time.monotonic()
                deadlines = [start + limit(by_module[m]) for m, (_, start) in running.items()]
                for line in server.lines(max(0.0, min(deadlines, default=now + 1) - now)):
                    kind, module, value = line.split(" ", 2)
                    if module not in running:
                        if kind == "started":
                            _kill_group(int(value))  # timed out before it even started
                        continue
                    if kind == "started":
                        running[module] = (int(value), time.monotonic())
                    elif kind == "exited":
                        finish(_collect(by_module[module], Path(folder), int(value)))
                for module, (pid, start) in list(running.items()):
                    fact = by_module[module]
                    if time.monotonic() - start > limit(fact):
                        if pid is not None:
                            _kill_group(pid)
                        tail = _tail(Path(folder) / f"{module}.err")
                        finish(Outcome(fact, TIMED_OUT, f"no verdict within {limit(fact):g} s\n{tail}".rstrip(),
                                       round(limit(fact), 3)))
                if server.closed:
                    reason = "the fact server died\n" + _tail(Path(folder) / "server.err")
                    for fact in [by_module[m] for m in running] + queue:
                        finish(Outcome(fact, FAILED, reason.rstrip(), 0.0))
                    queue.clear()
        finally:
            for pid, _ in running.values():
                if pid is not None:
                    _kill_group(pid)
            server.close()
    return [outcomes[f.module] for f in facts]


def _collect(fact: Fact, folder: Path, exit_code: int) -> Outcome:
    try:
        result = json.loads((folder / f"{fact.module}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return Outcome(fact, FAILED, f"{how_it_ended(exit_code)}\n{_tail(folder / f'{fact.module}.err')}".rstrip(), 0.0)
    return Outcome(fact, result["verdict"], result["evidence"], result["seconds"], result["torch"])


def run_fact(fact: Fact, timeout_s: float | None = None) -> Outcome:
    """Run one fact in its own process."""
    return run_facts([fact], jobs=1, timeout_s=timeout_s)[0]
