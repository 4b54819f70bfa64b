"""``torchpact lint``: its options, the files' settings, the report and the exit code (ruff's conventions)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchpact.cli import _add_output_options, _split, installed_torch_version, plural
from torchpact.commands.outcome import Outcome, Report, UsageError
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
    lint.add_argument("--extend-select", metavar="CODES",
                      help="comma-separated codes, prefixes or categories to run as well as the selected ones")
    lint.add_argument("--fix", action="store_true", help="apply safe fixes in place (with -: print the fixed code)")
    lint.add_argument("--unsafe-fixes", action="store_true",
                      help="with --fix / --diff, also the fixes that may change what the program does (see each "
                           "rule's Fix safety; `torchpact rules` marks them `unsafe`)")
    lint.add_argument("--diff", action="store_true", help="print the fixes as a diff; change nothing")
    lint.add_argument("--add-noqa", action="store_true",
                      help="add `# noqa: CODE` to each line with a finding now (merging into a `# noqa` already there)")
    lint.add_argument("--exit-zero", action="store_true", help="exit 0 even when findings are reported (2 still means "
                                                                "a usage error)")
    lint.add_argument("--statistics", action="store_true",
                      help="print how many findings each code has, instead of them")
    lint.add_argument("--stdin-filename", metavar="NAME",
                      help="with PATH `-` (or no PATH): read the source from standard input and report it as NAME, "
                           "whose configuration applies (editors, pre-commit pipes)")
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
    from torchpact.config import Codes, Overrides, Settings, check_selectors
    from torchpact.lint import rule_codes
    from torchpact.project import parse_version

    # a [tool.torchpact] shared with `run` may name runtime checks' codes: known too, loaded only if needed
    codes = Codes(rule_codes(), _runtime_codes)
    select, ignore, extend = _split(args.select), _split(args.ignore), _split(args.extend_select)
    check_selectors(select, codes, "--select")
    check_selectors(extend, codes, "--extend-select")
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
                    overrides=Overrides(select=select or None, extend_select=extend, ignore=ignore, min_torch=min_torch,
                                        preview=bool(getattr(args, "preview", False)),
                                        unsafe_fixes=args.unsafe_fixes), codes=codes)


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


def execute(args: argparse.Namespace) -> Outcome:
    from torchpact.lint import lint_paths

    stdin = args.paths == ["-"] or (not args.paths and args.stdin_filename is not None)
    if "-" in args.paths and not stdin:
        raise UsageError("`-` (standard input) cannot be linted together with other paths")
    if args.add_noqa and (args.fix or args.diff or stdin):
        raise UsageError("--add-noqa changes the files themselves: not with --fix, --diff or standard input")
    settings = lint_settings(args)
    if stdin:
        return _lint_stdin(args, settings)
    # as ruff: a path that does not exist is a finding, and the other paths are linted
    missing = [p for p in args.paths if not os.path.lexists(p)]
    paths = [p for p in args.paths if p not in missing] if args.paths else ["."]
    result = lint_paths(paths, settings=settings, fix=args.fix or args.diff, jobs=args.jobs, write=not args.diff,
                        force_exclude=args.force_exclude, cache=not args.no_cache) if paths else None
    files = result.files if result is not None else []
    if not files and not missing:
        # as ruff: say so, and exit 0 (a hook run on a change with no Python file must not fail)
        print("torchpact: warning: no Python files found under the given path(s)", file=sys.stderr)
    if args.diff:
        changed, diff = 0, []
        for r in files:
            if r.fixed is not None and r.original is not None:
                changed += 1
                diff += fix_diff(r.path, r.original, r.fixed)
        return Outcome(text="".join(diff), notes=[f"{plural(changed, 'file')} would be fixed"], failed=bool(changed),
                       exit_zero=args.exit_zero)
    from torchpact.findings import input_finding

    findings = [input_finding(p, "no such file or folder: nothing was linted there") for p in missing]
    findings += result.findings if result is not None else []
    if args.add_noqa:
        added = add_noqa_to_files(files)
        return Outcome(notes=[f"torchpact: added {plural(added, 'noqa directive')}"])
    return Outcome(findings=findings, fail_on=args.fail_on, exit_zero=args.exit_zero,
                   report=_report(args, findings, result))


def _lint_stdin(args: argparse.Namespace, settings: Settings) -> Outcome:
    """``lint -``: the source on standard input, reported as ``--stdin-filename``. With --fix the fixed source
    goes to stdout and the report to stderr (as ruff), so the command can sit in an editor's pipe."""
    from torchpact.lint import lint_stdin
    from torchpact.lint.files import _force_excluded, excluded_by

    name = args.stdin_filename or "-"
    data = sys.stdin.buffer.read()
    if args.force_exclude and args.stdin_filename and _force_excluded(name, excluded_by(settings.for_path)):
        if args.fix:
            sys.stdout.buffer.write(data)  # excluded: the source passes through unchanged, byte for byte
        return Outcome()
    result = lint_stdin(data, name, settings.for_path(name), fix=args.fix or args.diff)
    [r] = result.files
    if args.diff:
        diff = fix_diff(r.path, r.original, r.fixed) if r.fixed is not None and r.original is not None else []
        return Outcome(text="".join(diff), failed=r.fixed is not None, exit_zero=args.exit_zero)
    findings = result.findings
    outcome = Outcome(findings=findings, fail_on=args.fail_on, exit_zero=args.exit_zero)
    if args.fix:
        fixed = r.fixed if r.fixed is not None else r.original
        outcome.text = fixed if fixed is not None else data.decode("utf-8", "replace")
        if not args.output:
            outcome.report = _report(args, findings, result, sources=_stdin_sources(r, fixed), to_stderr=True)
            return outcome
    outcome.report = _report(args, findings, result, sources=_stdin_sources(r, r.original))
    return outcome


def _stdin_sources(r: Any, text: str | None) -> dict[str, str]:
    """The text the report's snippets come from: standard input is on no disk."""
    return {r.path: text} if text is not None else {}


def _report(args: argparse.Namespace, findings: list[Finding], result: Any, sources: dict[str, str] | None = None,
            to_stderr: bool = False) -> Report:
    """The report in ``--format`` (or the counts per code with --statistics)."""
    files, lines, seconds = (len(result.files), result.lines, result.seconds) if result is not None else (0, 0, 0.0)
    fixes, hidden = (result.fixes_applied, result.hidden) if result is not None else (0, 0)
    unfinished = unfinished_rules(findings)
    meta: dict[str, Any] = {
        "command": "lint " + " ".join(args.paths or ["."]),
        "torch": installed_torch_version(),
        "summary": {"files": files, "lines": lines, "seconds": round(seconds, 3), "fixes_applied": fixes,
                    "preview_hidden": hidden, **({"unfinished": unfinished} if unfinished else {})},
        "fixed": args.fix, "unsafe_fixes": args.unsafe_fixes, "sources": sources or {},
    }
    foot = f"{plural(files, 'file')}, {plural(lines, 'line')} in {seconds:.2f}s"
    if args.fix:
        foot += f"; {plural(fixes, 'fix', 'fixes')} applied"
    if hidden:
        foot += (f"; {hidden} preview finding{'s' * (hidden != 1)} not shown (not yet measured "
                 "precise enough to be on by default: --preview shows them)")
    return Report(findings, meta, format=args.format, output=args.output, to_stderr=to_stderr,
                  footer=[foot] + ([unfinished_line(unfinished)] if unfinished else []), runtime_rules=False,
                  rendered=statistics(findings, args.format) if args.statistics else None)


def statistics(findings: list[Finding], fmt: str) -> str:
    """How many findings each code has, most first (ruff's --statistics): text lines, or JSON for json."""
    from collections import Counter

    from torchpact.lint.docs import special_codes
    from torchpact.lint.registry import all_rules

    names = {r.code: r.name() for r in all_rules()}
    names.update({c: t.splitlines()[0].split("— ", 1)[1] for c, t in special_codes().items()})
    counts = Counter(f.code for f in findings)
    fixable = {f.code for f in findings if f.extra.get("fixable") and f.extra.get("fix_applicability") != "unsafe"}
    rows = [{"code": code, "name": names.get(code, code.lower()), "count": n, "fixable": code in fixable}
            for code, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    if fmt == "json":
        import json

        return json.dumps(rows, indent=2) + "\n"
    width = max((len(str(r["count"])) for r in rows), default=1)
    return "".join(f"{r['count']:>{width}}\t{r['code']}\t{'[*] ' if r['fixable'] else ''}{r['name']}\n"
                   for r in rows)


def add_noqa_to_files(files: list[Any]) -> int:
    """``--add-noqa``: each file's reported findings silenced on their lines; the number of lines changed.
    A line that cannot take a comment (it ends inside a string, or in a backslash) is named on stderr."""
    from torchpact.lint.noqa import add_noqa
    from torchpact.lint.source import SourceError, read_source

    added = 0
    for r in files:
        if not r.findings:
            continue
        try:
            source = read_source(r.path)
        except SourceError:
            continue
        fixed, changed, skipped = add_noqa(source, r.findings)
        if changed:
            with open(r.path, "w", encoding="utf-8", newline="") as fh:
                fh.write(fixed.file_text)
            added += changed
        if skipped:
            print(f"torchpact: {r.path}: {plural(skipped, 'line')} left without `# noqa`: the line ends inside a "
                  "string or continues with a backslash", file=sys.stderr)
    return added


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
