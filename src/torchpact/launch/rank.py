"""One rank of `torchpact run --nproc N`: started by torch.distributed.run as
``python -m torchpact.launch.rank --report-dir DIR [options] -- SCRIPT ARGS...``.

Runs the script under the watchers and keeps ``DIR/rank-<RANK>.json`` up to date: after every new
finding and at the end, so a rank killed by the launcher still leaves what it saw.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from torchpact.launch.single import LaunchError, RunOutcome, run_script
from torchpact.watch import Sampler


def rank_file(report_dir: str, rank: int) -> str:
    return os.path.join(report_dir, f"rank-{rank}.json")


def _write(path: str, doc: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="torchpact.launch.rank")
    ap.add_argument("--report-dir", required=True)
    ap.add_argument("--watchers")
    ap.add_argument("--sample-first", type=int, default=20)
    ap.add_argument("--sample-every", type=int, default=10)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    opts = ap.parse_args(argv)
    args = opts.args[1:] if opts.args[:1] == ["--"] else opts.args
    rank = int(os.environ.get("RANK", "0"))
    path = rank_file(opts.report_dir, rank)
    state: dict[str, Any] = {"rank": rank, "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
                             "world_size": int(os.environ.get("WORLD_SIZE", "1")), "finished": False}

    def save(session, data: dict[str, Any] | None = None) -> None:
        steps = session.step  # read once: a watcher thread may save while the main thread ends a step
        _write(path, {**state, "steps": steps, "step_times": session.step_times[:steps],
                      "findings": [f.to_dict() for f in session.findings], "data": data or {}})

    try:
        outcome: RunOutcome = run_script(
            opts.script, args, watchers=[w for w in (opts.watchers or "").split(",") if w] or None,
            sampler=Sampler(opts.sample_first, opts.sample_every), live=not opts.quiet,
            sink=save, rank=rank)
    except LaunchError as exc:
        print(f"torchpact: error: {exc}", file=sys.stderr)
        return 2
    state.update(finished=True, exit_code=outcome.exit_code, error=outcome.error, seconds=outcome.seconds)
    save(outcome.session, outcome.data)  # the watchers' series only at the end: reading them costs a sync
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
