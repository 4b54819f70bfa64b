"""Run facts' experiments: one in this process, or many as a fork server for the runner.

``python -m torchpact.facts.run_one ID`` runs one fact in a brand-new interpreter and prints one
JSON object: ``{"id", "verdict", "evidence", "torch", "seconds"}``.

``python -m torchpact.facts.run_one --serve DIR [MODULE...]`` is what :mod:`torchpact.facts.runner`
starts: it imports torch (and the MODULEs) once, then for each fact module read from stdin forks a child that runs that
one fact and writes ``DIR/MODULE.json`` (its result) and ``DIR/MODULE.err`` (what it wrote to stdout/stderr). Starting
Python and importing torch costs about 2 s of CPU; a fork costs milliseconds, and the child starts
from the state of a process that has done nothing but import torch, so no experiment sees another's
state. Each child leads its own process group, so the runner can end it and every process it
started. The server reports ``started MODULE PID`` and ``exited MODULE CODE`` lines on stdout.

What an experiment prints becomes its evidence; what is written below Python (C++ logs) goes to
stderr, never into the evidence or the protocol.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import signal
import sys
import time
import traceback
import warnings

from torchpact.facts import (NEEDS_CUDA, NEEDS_DISTRIBUTED, NEEDS_GPUS, VERDICTS, Fact, fact_by_id,
                             fact_from_module)


def unmet_requirement(fact: Fact) -> str | None:
    """Why ``fact`` cannot run here (``needs CUDA``...), or None."""
    import torch

    if fact.requires == "cuda" and not torch.cuda.is_available():
        return NEEDS_CUDA
    if fact.requires == "multi-gpu" and torch.cuda.device_count() < 2:
        return NEEDS_GPUS
    if fact.requires == "distributed-cpu" and not torch.distributed.is_available():
        return NEEDS_DISTRIBUTED
    return None


def execute(fact: Fact) -> dict:
    """Run the experiment in this process; its verdict (or why it did not run) and its evidence."""
    import torch

    start = time.perf_counter()
    torch.set_num_threads(1)  # facts run one per core; small experiments need no more
    skipped = unmet_requirement(fact)
    evidence = io.StringIO()
    if skipped is None:
        with contextlib.redirect_stdout(evidence), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an experiment that looks for a warning records its own
            verdict = fact.load().run()
        if verdict not in VERDICTS:
            raise TypeError(f"{fact.id}: run() returned {verdict!r}, not one of {VERDICTS}")
    else:
        verdict = skipped
    return {"id": fact.id, "verdict": verdict, "evidence": evidence.getvalue().rstrip("\n"),
            "torch": torch.__version__, "seconds": round(time.perf_counter() - start, 3)}


def _child(module: str, folder: str) -> None:
    """In a forked child of the server: run one fact, write its result file, never return."""
    code = 1
    try:
        os.setsid()
        err = os.open(os.path.join(folder, f"{module}.err"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(err, 1)
        os.dup2(err, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        result = execute(fact_from_module(module))
        path = os.path.join(folder, f"{module}.json")
        with open(path + ".part", "w", encoding="utf-8") as fh:
            json.dump(result, fh)
        os.replace(path + ".part", path)
        code = 0
    except BaseException:  # noqa: BLE001 - reported through the .err file
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)  # experiments may leave threads or process groups behind: skip teardown


def serve(folder: str, preload: list[str]) -> None:
    """The fork server: one child per fact module read from stdin, until stdin closes."""
    import importlib

    import torch  # noqa: F401  once, for every child

    for name in preload:  # e.g. torch._dynamo, which DDP, torch.compile and torch.export all import
        importlib.import_module(name)

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runner decides; Ctrl-C reaches it, not us
    children: dict[int, str] = {}
    pending = b""
    open_ = True
    out = sys.stdout

    def report(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    report("ready")
    while open_ or children:
        readable, _, _ = select.select([0] if open_ else [], [], [], 0.05 if children or not open_ else None)
        if readable:
            chunk = os.read(0, 4096)
            if not chunk:
                open_ = False
                for pid in children:  # the runner is gone: end what it started
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid, signal.SIGKILL)
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                module = line.decode().strip()
                if not module:
                    continue
                pid = os.fork()
                if pid == 0:
                    _child(module, folder)
                children[pid] = module
                report(f"started {module} {pid}")
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            report(f"exited {children.pop(pid)} {os.waitstatus_to_exitcode(status)}")


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "--serve":
        serve(argv[1], argv[2:])
        return 0
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m torchpact.facts.run_one ID", file=sys.stderr)
        return 2
    fact = fact_by_id(argv[0])
    if fact is None:
        print(f"no fact {argv[0]}; `torchpact facts` lists them", file=sys.stderr)
        return 2
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # C++ output must not corrupt the JSON
    result = execute(fact)
    channel.write(json.dumps(result) + "\n")
    channel.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
