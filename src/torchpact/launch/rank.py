"""One rank of `torchpact run --nproc N`: started by torch.distributed.run as
``python -m torchpact.launch.rank --report-dir DIR [options] [--module] SCRIPT -- ARGS...``.

Runs the script under the watchers and keeps ``DIR/rank-<RANK>.json`` up to date: after every new
finding and at the end, so a rank killed by the launcher still leaves what it saw.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
from typing import Any

from torchpact.launch.single import LaunchError, RunOutcome, run_script
from torchpact.watch import Sampler


PR_SET_PDEATHSIG = 1
LAUNCHER_PID_ENV = "TORCHPACT_LAUNCHER_PID"


def rank_file(report_dir: str, rank: int) -> str:
    return os.path.join(report_dir, f"rank-{rank}.json")


def _write(path: str, doc: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    os.replace(tmp, path)


def die_with_launcher() -> None:
    """SIGKILL this rank when the process that started it dies (Linux): torch.distributed.run starts each
    rank in its own session, so a launcher killed outright would otherwise leave it running, an orphan."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):  # not Linux: the launcher's own shutdown stops the ranks
        return
    launcher = os.environ.get(LAUNCHER_PID_ENV)
    if launcher and launcher.isdigit() and os.getppid() != int(launcher):
        os._exit(128 + signal.SIGKILL)  # the launcher died before the line above took effect


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="torchpact.launch.rank")
    ap.add_argument("--report-dir", required=True)
    ap.add_argument("--watchers")
    ap.add_argument("--sample-first", type=int, default=Sampler().first)
    ap.add_argument("--sample-every", type=int, default=Sampler().every)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--module", action="store_true", help="SCRIPT is a module name, run as python -m runs it")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    return ap


def main(argv: list[str] | None = None) -> int:
    opts = parser().parse_args(argv)
    die_with_launcher()
    args = opts.args[1:] if opts.args[:1] == ["--"] else opts.args
    rank = int(os.environ.get("RANK", "0"))
    path = rank_file(opts.report_dir, rank)
    state: dict[str, Any] = {"rank": rank, "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
                             "world_size": int(os.environ.get("WORLD_SIZE", "1")), "finished": False,
                             "pid": os.getpid()}

    def save(session, data: dict[str, Any] | None = None) -> None:
        steps = session.step  # read once: a watcher thread may save while the main thread ends a step
        _write(path, {**state, "steps": steps, "step_times": session.step_times[:steps],
                      "findings": [f.to_dict() for f in session.findings], "data": data or {}})

    try:
        outcome: RunOutcome = run_script(
            opts.script, args, watchers=[w for w in (opts.watchers or "").split(",") if w] or None,
            sampler=Sampler(opts.sample_first, opts.sample_every), live=not opts.quiet, module=opts.module,
            sink=save, rank=rank)
    except LaunchError as exc:
        print(f"torchpact: error: {exc}", file=sys.stderr)
        return 2
    state.update(finished=True, exit_code=outcome.exit_code, error=outcome.error, seconds=outcome.seconds)
    save(outcome.session, outcome.data)  # the watchers' series only at the end: reading them costs a sync
    code = outcome.exit_code
    # Release what the run still references (the session, through it any watcher state) and the script's
    # garbage cycles now, in a running interpreter: a DDP Reducer and its process group freed during the
    # interpreter's teardown can block it (~ProcessGroupGloo joining its threads).
    del outcome
    gc.collect()
    return code


if __name__ == "__main__":
    sys.exit(main())
