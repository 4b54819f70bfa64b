"""``torchpact run``: the script (or module) under the watchers, alone, supervised or on N ranks; its report."""

from __future__ import annotations

import argparse
from typing import Any

from torchpact.cli import _split, installed_torch_version, require_torch
from torchpact.commands.outcome import Outcome, Report, UsageError, check_writable

DOCUMENT_FORMATS = ("json", "sarif")  # one document that a stray line makes unreadable (github: line by line)


def execute(args: argparse.Namespace) -> Outcome:
    """Run the script; the findings decide the exit code unless the script failed, whose code then stands.
    Supervised (a child process that this one outlives) when torchpact is the program, not called from Python."""
    from torchpact.launch import supervise
    from torchpact.launch.single import LaunchError, run_script
    from torchpact.watch import Sampler

    module = args.module is not None
    if module:
        if args.script is not None:
            raise UsageError("give a SCRIPT or -m MODULE, not both (options for torchpact come before -m)")
        if not args.module:
            raise UsageError("-m needs a module name: torchpact run -m package.module ARGS...")
        args.script, args.args = args.module[0], args.module[1:]
    elif args.script is None:
        raise UsageError("run needs a SCRIPT (or -m MODULE): torchpact run train.py ARGS...")

    if args.sample_first < 0 or args.sample_every < 1:
        raise UsageError("--sample-first must be >= 0 and --sample-every >= 1")
    require_torch("run")
    sampler = Sampler(args.sample_first, args.sample_every)
    if args.format in DOCUMENT_FORMATS and not args.output:
        # The script's stdout is the user's: a document on the same stream would not parse.
        raise UsageError(f"run --format {args.format} needs --output FILE: stdout belongs to the script, whose "
                         "own output would corrupt the report (text and github reports may go to stdout)")
    for path in (args.output, args.html):  # before the script runs: not after hours of training
        check_writable(path)
    watchers = _watchers(args)
    supervised = False
    try:
        if args.nproc is not None:
            from torchpact.launch.distributed import run_distributed

            outcome = run_distributed(args.script, args.args, nproc=args.nproc, nnodes=args.nnodes,
                                      node_rank=args.node_rank, rdzv_endpoint=args.rdzv_endpoint,
                                      watchers=_split(args.watchers) or None, sampler=sampler,
                                      quiet=args.quiet, module=module)
        elif args.own_process and supervise.available():
            supervised = True
            outcome = supervise.run_supervised(args.script, args.args, watchers=watchers, sampler=sampler,
                                               live=not args.quiet, module=module)
        else:
            outcome = run_script(args.script, args.args, watchers=watchers, sampler=sampler, live=not args.quiet,
                                 module=module)
    except LaunchError as exc:
        raise UsageError(str(exc)) from None
    from torchpact.launch.footer import run_footer

    meta: dict[str, Any] = {
        "command": "run " + " ".join([*(["-m"] if module else []), args.script, *args.args]),
        "torch": outcome.torch or installed_torch_version(),  # this process may never have imported torch
        "summary": outcome.summary(),
    }
    heading = ""
    if not args.output and args.format == "text":
        heading = "\n== torchpact report\n"
    elif not args.output and args.format == "github":
        heading = "\n"  # each annotation on a line of its own, whatever the script printed last
    return Outcome(findings=outcome.findings, fail_on=args.fail_on, code=outcome.exit_code, text=heading,
                   supervised=supervised,
                   report=Report(outcome.findings, meta, format=args.format, output=args.output, html=args.html,
                                 footer=run_footer(outcome), stamp_exit=True, after_run=True))


def _watchers(args: argparse.Namespace) -> list[Any] | None:
    """The watchers named by --watchers (checked: a typo is a usage error), with --profile's StepProfile."""
    watchers: list[Any] | None = _split(args.watchers) or None
    if watchers:
        from torchpact.watch import watcher_classes

        known = [c.name for c in watcher_classes()]
        for name in watchers:
            if name not in known:
                from torchpact.config import closest

                raise UsageError(f"unknown watcher {name!r}{closest(name, known)}; known: {', '.join(known)}")
    if args.profile:
        if args.profile_steps < 1 or args.profile_warmup < 0:
            raise UsageError("--profile-steps must be >= 1 and --profile-warmup >= 0")
        if args.nproc is not None:
            raise UsageError("--profile profiles one process; run it without --nproc (or profile one rank's script)")
        from torchpact.watch import make_watchers
        from torchpact.watch.watchers.step_profile import StepProfile

        try:
            watchers = [w for w in make_watchers(watchers) if w.name != StepProfile.name]
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        watchers.append(StepProfile(warmup=args.profile_warmup, steps=args.profile_steps, trace_dir=args.profile_dir))
    return watchers
