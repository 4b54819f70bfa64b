"""``torchpact lint``: its options, the files' settings, the report and the exit code (ruff's conventions)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchpact.cli import (EXIT_FINDINGS, EXIT_OK, UsageError, _add_output_options, _split, emit, exit_code,
                           installed_torch_version, plural)
from torchpact.findings import Finding

if TYPE_CHECKING:
    from torchpact.config import Settings


def add_options(lint: argparse.ArgumentParser) -> None:
    """The lint command's options."""
    lint.add_argument("paths", nargs="*", metavar="PATH", help="files or folders (default: .)")
    lint.add_argument("--select", metavar="CODES", help="comma-separated codes, prefixes or categories to run")
    lint.add_argument("--ignore", metavar="CODES", help="comma-separated codes, prefixes or categories to skip")
    lint.add_argument("--preview", action="store_true",
                      help="also report findings not yet measured precise enough to be on by default "
                           "(an exact code in --select reports its own)")
    lint.add_argument("--fix", action="store_true", help="apply safe fixes in place")
    lint.add_argument("--diff", action="store_true", help="print the safe fixes as a diff; change nothing")
    lint.add_argument("--config", metavar="PYPROJECT",
                      help="pyproject.toml to read [tool.torchpact] from, for every file "
                           "(default: each file's closest pyproject.toml with a [tool.torchpact] table)")
    lint.add_argument("--force-exclude", action="store_true",
                      help="skip excluded paths (and virtualenvs, ignored folders) even when named on the command line")
    lint.add_argument("--min-torch", metavar="X.Y", help="oldest torch the code must support")
    lint.add_argument("--jobs", "-j", type=int, default=None, help="parallel processes (default: all cores)")
    lint.add_argument("--no-cache", action="store_true",
                      help="lint every file again instead of reusing .torchpact_cache/ for unchanged ones")
    _add_output_options(lint, "warning")


def _runtime_codes() -> list[str]:
    from torchpact.docs import runtime_checks

    return list(runtime_checks())


def lint_settings(args: argparse.Namespace) -> Settings:
    """Each file's configuration, with the command line's options on top; a selector that selects
    nothing is a usage error, as in ruff (a typo must not turn checks off)."""
    from torchpact.config import Codes, Overrides, Settings, check_selectors, parse_version
    from torchpact.lint import rule_codes

    # a [tool.torchpact] shared with `run` may name runtime checks' codes: known too, loaded only if needed
    codes = Codes(rule_codes(), _runtime_codes)
    select, ignore = _split(args.select), _split(args.ignore)
    check_selectors(select, codes, "--select")
    check_selectors(ignore, codes, "--ignore")
    min_torch = None
    if args.min_torch:
        min_torch = parse_version(args.min_torch)
        if min_torch is None:
            raise UsageError(f"--min-torch must look like 2.4, not {args.min_torch!r}")
    if args.config and not os.path.isfile(args.config):
        raise UsageError(f"config file not found: {args.config}")
    budget = os.environ.get("TORCHPACT_RULE_BUDGET")
    if budget:
        try:
            float(budget)
        except ValueError:
            raise UsageError(f"TORCHPACT_RULE_BUDGET must be a number of seconds, not {budget!r}") from None
    return Settings(config_file=Path(args.config) if args.config else None,
                    overrides=Overrides(select=select or None, ignore=ignore, min_torch=min_torch,
                                        preview=bool(getattr(args, "preview", False))), codes=codes)


def fix_diff(path: str, before: str, after: str) -> list[str]:
    """A unified diff of a fix; for a notebook, one per changed cell (``a/nb.ipynb:cell 3``)."""
    import difflib

    if not path.endswith(".ipynb"):
        return list(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                         fromfile=f"a/{path}", tofile=f"b/{path}"))
    from torchpact.lint.source import cell_sources

    old, new = cell_sources(before), cell_sources(after)
    out: list[str] = []
    for number, text in old.items():
        lines = [ln if ln.endswith("\n") else ln + "\n" for ln in text.splitlines(keepends=True)]
        fixed = [ln if ln.endswith("\n") else ln + "\n" for ln in new.get(number, text).splitlines(keepends=True)]
        out += difflib.unified_diff(lines, fixed, fromfile=f"a/{path}:cell {number}",
                                    tofile=f"b/{path}:cell {number}")
    return out


def cmd_lint(args: argparse.Namespace) -> int:
    from torchpact.lint import lint_paths
    from torchpact.report import render
    from torchpact.report.text import use_color

    for p in args.paths:
        if not os.path.lexists(p):
            raise UsageError(f"no such file or folder: {p}")
    result = lint_paths(args.paths or ["."], settings=lint_settings(args), fix=args.fix or args.diff,
                        jobs=args.jobs, write=not args.diff, force_exclude=args.force_exclude,
                        cache=not args.no_cache)
    if not result.files:
        # as ruff: say so, and exit 0 (a hook run on a change with no Python file must not fail)
        print("torchpact: warning: no Python files found under the given path(s)", file=sys.stderr)
    if args.diff:
        changed = 0
        for r in result.files:
            if r.fixed is not None and r.original is not None:
                changed += 1
                sys.stdout.writelines(fix_diff(r.path, r.original, r.fixed))
        print(f"{plural(changed, 'file')} would be fixed", file=sys.stderr)
        return EXIT_FINDINGS if changed else EXIT_OK
    findings = result.findings
    unfinished = unfinished_rules(findings)
    meta: dict[str, Any] = {
        "command": "lint " + " ".join(args.paths or ["."]),
        "torch": installed_torch_version(),
        "summary": {"files": len(result.files), "lines": result.lines,
                    "seconds": round(result.seconds, 3), "fixes_applied": result.fixes_applied,
                    "preview_hidden": result.hidden, **({"unfinished": unfinished} if unfinished else {})},
        "fixed": args.fix,
        "color": args.format == "text" and not args.output and use_color(),
    }
    if args.format == "sarif":
        from torchpact.docs import rule_table

        meta["rules"] = rule_table(include_runtime=False)  # lint never imports torch
    if args.format == "text":
        foot = f"{plural(len(result.files), 'file')}, {plural(result.lines, 'line')} in {result.seconds:.2f}s"
        if args.fix:
            foot += f"; {plural(result.fixes_applied, 'fix', 'fixes')} applied"
        if result.hidden:
            foot += (f"; {result.hidden} preview finding{'s' * (result.hidden != 1)} not shown (not yet measured "
                     "precise enough to be on by default: --preview shows them)")
        meta["footer"] = [foot] + ([unfinished_line(unfinished)] if unfinished else [])
    emit(render(args.format, findings, meta), args.output)
    return exit_code(findings, args.fail_on)


def unfinished_rules(findings: list[Finding]) -> list[dict[str, Any]]:
    """Each rule that stopped before the end of a file (TP002: out of time, or failed), and where (paths as
    the reports show them: relative to the working directory when under it)."""
    from torchpact.findings import relative_path

    return [{"rule": f.extra["rule"], "stopped": f.extra.get("stopped"), "path": relative_path(f.path), "cell": f.cell,
             "line": f.line} for f in findings if f.code == "TP002" and f.extra.get("rule")]


def unfinished_line(unfinished: list[dict[str, Any]], shown: int = 5) -> str:
    """The summary's line naming the rules that did not finish a file, and where they stopped."""
    places = []
    for u in unfinished[:shown]:
        where = ":".join(str(p) for p in (u["path"], u["cell"] and f"cell {u['cell']}", u["line"]) if p)
        places.append(f"{u['rule']} at {where} ({u['stopped']})")
    more = f" and {len(unfinished) - shown} more" if len(unfinished) > shown else ""
    n = len(unfinished)
    return (f"{n} rule{'s' * (n != 1)} stopped before the end of a file, so {'their' if n != 1 else 'its'} "
            f"findings there may be incomplete (TP002): {', '.join(places)}{more}")
