"""``torchpact facts``: common PyTorch advice checked against the installed torch, one experiment per claim."""

from __future__ import annotations

import argparse
import sys

from torchpact.cli import require_torch
from torchpact.commands.outcome import Outcome, UsageError


def execute(args: argparse.Namespace) -> Outcome:
    """The listing (--list), or the experiments' verdicts; failed when a verdict differs from the supported
    torch's or an experiment failed."""
    import json
    import time

    from torchpact.facts import FAILED, TIMED_OUT, all_facts, fact_by_id, report, rules_by_fact
    from torchpact.facts.runner import run_facts

    links = rules_by_fact()
    selected = list(all_facts())
    if args.id:
        fact = fact_by_id(args.id)
        if fact is None:
            raise UsageError(f"no fact {args.id}; `torchpact facts --list` lists them")
        selected = [fact]
    if args.area:
        selected = [f for f in selected if f.area == args.area]
        if not selected:
            raise UsageError(f"no fact in area {args.area}; areas: {', '.join(sorted({f.area for f in all_facts()}))}")
    if args.jobs is not None and args.jobs < 1 or args.timeout is not None and args.timeout <= 0:
        raise UsageError("--jobs and --timeout must be positive")
    if args.list:
        if args.json:
            return Outcome(text=json.dumps([{"id": f.id, "area": f.area, "claim": f.claim, "expected": f.expected,
                                             "requires": f.requires, "rules": links.get(f.id, [])}
                                            for f in selected], indent=2) + "\n")
        return Outcome(text=report.listing(selected, links))
    require_torch("facts" if not args.id else f"facts {args.id}")  # each experiment runs torch
    if sys.stderr.isatty() and not args.json and len(selected) > 1:
        print(f"running {len(selected)} experiments...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    outcomes = run_facts(selected, jobs=args.jobs, timeout_s=args.timeout)
    seconds = time.perf_counter() - start
    torch_version = next((o.torch for o in outcomes if o.torch), None)
    if args.json:
        from torchpact import __version__

        command = "facts" + (f" {args.id}" if args.id else "")
        text = report.as_json(outcomes, links, {"version": __version__, "torch": torch_version,
                                                "command": command, "seconds": round(seconds, 3)})
    elif args.id:
        text = report.detail(outcomes[0], links)
    else:
        text = report.text(outcomes, links, torch_version, seconds)
    return Outcome(text=text, failed=any(o.changed or o.verdict in (FAILED, TIMED_OUT) for o in outcomes))
