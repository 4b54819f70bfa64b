"""``torchpact export-check`` and ``compile-check``: load the target (a bad one is a usage error), check it."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from torchpact.cli import _split, require_torch
from torchpact.commands.outcome import Outcome, Report, UsageError


def execute(args: argparse.Namespace) -> Outcome:
    require_torch(args.command)
    import torch

    from torchpact.audit import footer
    from torchpact.audit.target import TargetError, load_target

    export = args.command == "export-check"
    chosen = _split(args.paths if export else args.modes)
    from torchpact.audit.compile import CPU_MODES, CUDA_MODES, compile_check
    from torchpact.audit.export import PATHS, export_check

    known = PATHS if export else CPU_MODES + CUDA_MODES
    unknown = set(chosen) - set(known)
    if unknown:
        from torchpact.config import closest

        hint = closest(sorted(unknown)[0], known)
        raise UsageError(f"unknown {'path' if export else 'mode'}(s): {', '.join(sorted(unknown))}{hint}")
    try:
        target = load_target(args.target)
    except TargetError as exc:
        raise UsageError(str(exc)) from None
    progress = (lambda s: print(f"torchpact {args.command}: {s}...", file=sys.stderr, flush=True)) \
        if sys.stderr.isatty() else None
    if args.threads is not None and args.threads < 1:
        raise UsageError("--threads must be >= 1")
    result: Any = (
        export_check(target, paths=tuple(chosen) or PATHS, progress=progress, threads=args.threads) if export
        else compile_check(target, modes=tuple(chosen) or None, progress=progress, threads=args.threads))
    summary = result.summary()
    meta: dict[str, Any] = {"command": f"{args.command} {args.target}", "torch": torch.__version__,
                            "summary": summary}
    text_footer = (footer.export_footer if export else footer.compile_footer)(summary, args.target) \
        if args.format == "text" else None
    return Outcome(findings=result.findings, fail_on=args.fail_on,
                   report=Report(result.findings, meta, format=args.format, output=args.output, html=args.html,
                                 footer=text_footer, stamp_exit=True))
