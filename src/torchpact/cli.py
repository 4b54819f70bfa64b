"""Command line: argument parsing, reporter choice and exit codes; nothing else.

Exit codes: 0 no finding at or above ``--fail-on``; 1 findings at or above it; 2 usage error or bad
input to torchpact itself. ``run`` keeps the exit code of a script that failed: its own, or 128 + N
for a script (or, with ``--nproc``, the first rank) killed by signal N, as a shell shows it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from torchpact.findings import Finding, Severity

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
# torchpact.watch.Sampler's schedule and budget (not imported: lint starts without it)
SAMPLE_FIRST, SAMPLE_EVERY, SAMPLED_CALLS, SAMPLED_SHARE, SAMPLED_CHARGE = 10, 20, 2000, 0.01, 12
FORMAT_CHOICES = ("text", "json", "sarif", "github")
DOCUMENT_FORMATS = ("json", "sarif")  # one document that a stray line makes unreadable (github: line by line)


class UsageError(Exception):
    """Bad arguments or input to torchpact itself: one line on stderr, exit 2."""


def _add_output_options(p: argparse.ArgumentParser, default_fail_on: str,
                        output_help: str = "write the report to FILE instead of stdout") -> None:
    p.add_argument("--format", choices=FORMAT_CHOICES, default="text", help="report format (default: text)")
    p.add_argument("--output", "-o", metavar="FILE", help=output_help)
    p.add_argument("--fail-on", choices=[s.value for s in Severity], default=default_fail_on,
                   help=f"exit 1 when a finding is at or above this severity (default: {default_fail_on})")


def _add_html_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page (summary, findings, plots)")


def _run_options(run: argparse.ArgumentParser) -> None:
    run.usage = "%(prog)s [options] SCRIPT [ARGS ...]\n       %(prog)s [options] -m MODULE [ARGS ...]"
    run.add_argument("script", metavar="SCRIPT", nargs="?", help="the training script (a .py file)")
    run.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="the script's own arguments")
    run.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE",
                     help="run a module as `python -m MODULE ARGS...` does (the last torchpact option: what follows "
                          "is the module's); sys.path[0] is the working directory")
    run.add_argument("--quiet", "-q", action="store_true", help="no live findings on stderr")
    run.add_argument("--nproc", type=int, metavar="N",
                     help="launch N ranks per node through torch.distributed.run (gloo on CPU, NCCL on GPU)")
    run.add_argument("--nnodes", type=int, default=1, metavar="M", help="nodes of a multi-node job (default 1)")
    run.add_argument("--node-rank", type=int, default=0, metavar="R", help="this node's rank (multi-node)")
    run.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="rendezvous endpoint (multi-node)")
    run.add_argument("--watchers", metavar="NAMES", help="comma-separated watchers (default: all default ones)")
    run.add_argument("--sample-first", type=int, default=SAMPLE_FIRST, metavar="N",
                     help=f"run the expensive checks on each of the first N steps (default: {SAMPLE_FIRST}), within "
                          "the budget below")
    run.add_argument("--sample-every", type=int, default=SAMPLE_EVERY, metavar="N",
                     help=f"then on every N-th step (default: {SAMPLE_EVERY}), and on the steps that follow one "
                          "where a check saw a problem begin (a gradient norm jumping, updates far too large). "
                          f"Budget: sampled steps make at most {SAMPLED_CALLS} module calls plus "
                          f"{SAMPLED_SHARE * 100:g}%% of all the script's module calls, each sampled step counted "
                          f"{SAMPLED_CHARGE} calls more for its own checks, so a step of thousands of tiny module "
                          "calls (an RL rollout) and a long run of a tiny model are sampled less often")
    run.add_argument("--profile", action="store_true",
                     help="profile a few steps after warm-up (torch.profiler): where step time goes, top operators")
    run.add_argument("--profile-steps", type=int, default=5, metavar="N", help="steps to profile (default: 5)")
    run.add_argument("--profile-warmup", type=int, default=3, metavar="N",
                     help="steps to let pass before profiling (default: 3)")
    run.add_argument("--profile-dir", default="torchpact-profile", metavar="DIR",
                     help="where the trace goes, for TensorBoard / Perfetto (default: torchpact-profile)")
    _add_html_option(run)
    _add_output_options(run, "error", output_help="write the report to FILE instead of stdout (needed for json and "
                                                  "sarif: stdout is the script's)")


def _audit_command(name: str, what: str) -> tuple[str, str, Callable[[argparse.ArgumentParser], None]]:
    """``export-check`` and ``compile-check``: the same target and output options, one option of their own."""
    def add(audit: argparse.ArgumentParser) -> None:
        audit.add_argument("target", metavar="TARGET")
        audit.add_argument("--threads", type=int, metavar="N",
                           help="torch intra-op threads during the check (default: torch's setting)")
        if name == "export-check":
            audit.add_argument("--paths", metavar="NAMES",
                               help="comma-separated: trace,script,export,onnx (default: all)")
        else:
            audit.add_argument("--modes", metavar="MODES", help="comma-separated torch.compile modes "
                               "(default: default,max-autotune-no-cudagraphs; + reduce-overhead,max-autotune on CUDA)")
        _add_html_option(audit)
        _add_output_options(audit, "error")
    return what, (f"{what}. TARGET is FILE.py:FUNC or package.module:FUNC; FUNC returns (model, args) or "
                  "(model, args, kwargs)."), add


def _report_options(report: argparse.ArgumentParser) -> None:
    report.add_argument("json_report", metavar="REPORT.json")
    _add_html_option(report)
    _add_output_options(report, "error")


def _facts_options(facts: argparse.ArgumentParser) -> None:
    facts.add_argument("id", nargs="?", metavar="ID", help="one fact: its claim, verdict, evidence and code")
    facts.add_argument("--json", action="store_true", help="JSON instead of text")
    facts.add_argument("--list", action="store_true", help="list the claims and the rules resting on each; run nothing")
    facts.add_argument("--area", metavar="AREA", help="only the facts of this area (memory, autograd, ...)")
    facts.add_argument("--jobs", "-j", type=int, default=None, help="experiments at a time (default: all cores)")
    facts.add_argument("--timeout", type=float, default=None, metavar="S",
                       help="time limit per experiment in seconds (default: each fact's own)")


# name -> (help, description or None, the function that adds its arguments)
COMMANDS: dict[str, tuple[str, str | None, Callable[[argparse.ArgumentParser], None]]] = {
    "lint": ("static checks of PyTorch code (never imports torch)", None,
             lambda lint: _lint_command().add_options(lint)),
    "run": ("run a training script under the watchers",
            "Runs SCRIPT (or MODULE, as python -m does) unmodified as __main__ with its own ARGS, under "
            "torchpact's watchers.", _run_options),
    "export-check": _audit_command("export-check", "trace / script / torch.export / ONNX parity on varied inputs"),
    "compile-check": _audit_command("compile-check",
                                    "torch.compile graph breaks, recompiles, latency per mode, parity"),
    "report": ("render a saved JSON report again (--html page, or another --format)",
               "Reads a report written by `--format json` and renders it as an HTML page (--html) "
               "and/or in --format (default text).", _report_options),
    "rule": ("show a rule's documentation", None,
             lambda rule: rule.add_argument("code", metavar="TPnnn")),
    "rules": ("list every rule", None, lambda rules: None),
    "demo": ("lint the bundled examples and show what torchpact finds", None,
             lambda demo: demo.add_argument("path", nargs="?", help="examples folder (default: the bundled one)")),
    "server": ("a Language Server (LSP) over stdio: lint's findings, fixes and rule pages in the editor",
               "Speaks the Language Server Protocol on stdin/stdout (docs/editors.md). Needs the extra: "
               "pip install 'torchpact[server]'.",
               lambda server: server.add_argument(
                   "--stdio", action="store_true",
                   help="accepted for editors that pass it; stdio is the only transport")),
    "facts": ("check common PyTorch advice against the installed torch",
              "Runs one small experiment per claim, each in its own process, and prints the verdict "
              "on the installed torch, its evidence and the rules that rest on it. Exit 1 when a "
              "verdict differs from the supported torch's or an experiment failed.", _facts_options),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; with ``command``, that command's only. ``torchpact run`` pays its start-up
    on every training script, and argparse builds each command's parser with its options in about 0.3 ms
    (more the first time: it looks for translations of its messages); a command line that names its
    command is parsed by that command's parser alone, which also writes its usage and errors."""
    from torchpact import __version__

    parser = argparse.ArgumentParser(
        prog="torchpact", description="Catches the bugs PyTorch does not tell you about.")
    parser.add_argument("--version", action="version", version=f"torchpact {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (what, description, add_options) in COMMANDS.items():
        if command is None or command == name:
            add_options(sub.add_parser(name, help=what, description=description))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The command line. Without ``argv`` this is the program (``torchpact``, ``python -m torchpact``): `run`
    then runs the script in a child process and reports from this one, which outlives it (see
    ``launch.supervise``). With ``argv``, called from Python, every command runs in the calling process."""
    own_process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    args = parser.parse_args(argv)
    try:
        if args.command == "lint":
            return _lint_command().cmd_lint(args)
        if args.command == "run":
            return cmd_run(args, supervised=own_process)
        if args.command == "rule":
            return cmd_rule(args)
        if args.command == "rules":
            return cmd_rules()
        if args.command in ("export-check", "compile-check"):
            return cmd_audit(args)
        if args.command == "demo":
            return cmd_demo(args)
        if args.command == "facts":
            return cmd_facts(args)
        if args.command == "report":
            return cmd_report(args)
        if args.command == "server":
            return cmd_server()
        parser.print_help()
        return EXIT_USAGE
    except _usage_errors() as exc:
        print(f"torchpact: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("torchpact: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `torchpact rules | head`: the reader left; exit quietly like other tools
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK


def _lint_command():
    from torchpact import lint_command

    return lint_command


def _usage_errors() -> tuple[type[Exception], ...]:
    """The errors reported in one line, without a traceback. An ``except`` clause evaluates this only once an
    exception reaches it: the config module is loaded by the commands that read a configuration (``run``
    starts without its TOML parsing), and only then can its ConfigError have been raised."""
    config = sys.modules.get("torchpact.config")
    return (UsageError,) if config is None else (UsageError, config.ConfigError)


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


def installed_torch_version() -> str | None:
    """The installed torch's version, read from its metadata: lint never imports torch. The first
    ``torch-*.dist-info`` on ``sys.path`` is where importlib.metadata finds it too, without loading
    importlib.metadata (a tenth of a one-file lint); that finds what the scan does not (an egg...)."""
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.startswith("torch-") and name.endswith(".dist-info"):
                try:
                    with open(os.path.join(entry, name, "METADATA"), encoding="utf-8") as fh:
                        for line in fh:
                            if line.startswith("Version:"):
                                return line.partition(":")[2].strip()
                            if not line.strip():
                                break  # the headers end at the first blank line
                except OSError:
                    pass
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def emit(text: str, output: str | None) -> None:
    if output:
        try:
            with open(output, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from None
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


def exit_code(findings: list[Finding], fail_on: str) -> int:
    threshold = Severity(fail_on)
    return EXIT_FINDINGS if any(f.severity >= threshold for f in findings) else EXIT_OK


def cmd_run(args: argparse.Namespace, supervised: bool = False) -> int:
    from torchpact.launch import supervise
    from torchpact.launch.single import LaunchError, run_script
    from torchpact.report import render
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
    try:
        if args.nproc is not None:
            from torchpact.launch.distributed import run_distributed

            outcome = run_distributed(args.script, args.args, nproc=args.nproc, nnodes=args.nnodes,
                                      node_rank=args.node_rank, rdzv_endpoint=args.rdzv_endpoint,
                                      watchers=_split(args.watchers) or None, sampler=sampler,
                                      quiet=args.quiet, module=module)
        elif supervised and supervise.available():
            outcome = supervise.run_supervised(args.script, args.args, watchers=watchers, sampler=sampler,
                                               live=not args.quiet, module=module)
        else:
            outcome = run_script(args.script, args.args, watchers=watchers, sampler=sampler, live=not args.quiet,
                                 module=module)
    except LaunchError as exc:
        raise UsageError(str(exc)) from None
    meta: dict[str, Any] = {
        "command": "run " + " ".join([*(["-m"] if module else []), args.script, *args.args]),
        "torch": outcome.torch or installed_torch_version(),  # this process may never have imported torch
        "summary": outcome.summary(),
        "color": args.format == "text" and not args.output and use_color_stdout(),
    }
    if args.format == "sarif" or args.html:  # SARIF's rule table, and the page's Rules section
        from torchpact.docs import rule_table

        meta["rules"] = rule_table(include_runtime=True)
    from torchpact.launch.footer import run_footer

    footer = run_footer(outcome)
    if args.format == "text":
        meta["footer"] = footer
        if not args.output:
            sys.stdout.write("\n== torchpact report\n")
    code = outcome.exit_code or exit_code(outcome.findings, args.fail_on)  # a failed script keeps its code
    meta["summary"].update(torchpact_exit_code=code, fail_on=args.fail_on)
    # The run is over: a report that cannot be written where asked goes to a temporary file instead,
    # and the script's exit code stands (a usage error now would throw the run away).
    if args.html:
        write_report(args.html, render("html", outcome.findings, meta), what="HTML report")
    if args.output:
        if not write_report(args.output, render(args.format, outcome.findings, meta)):
            sys.stdout.write(render("text", outcome.findings, {**meta, "footer": footer, "color": False}))
    else:
        if args.format == "github":
            sys.stdout.write("\n")  # each annotation on a line of its own, whatever the script printed last
        emit(render(args.format, outcome.findings, meta), None)
    return code


def check_writable(path: str | None) -> None:
    """A usage error, now, when ``path`` cannot receive a report: a folder, or a folder that is missing or read-only."""
    if not path:
        return
    if os.path.isdir(path):
        raise UsageError(f"cannot write {path}: it is a folder; give a file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"cannot write {path}: no folder {folder}")
    target = path if os.path.exists(path) else folder
    if not os.access(target, os.W_OK):
        raise UsageError(f"cannot write {path}: permission denied")


def write_report(path: str, text: str, what: str = "report") -> bool:
    """Write ``text`` to ``path``; when that fails, to a temporary file whose path is printed. False then."""
    import tempfile

    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        suffix = os.path.splitext(path)[1] or ".txt"
        fd, fallback = tempfile.mkstemp(prefix="torchpact-report-", suffix=suffix)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        print(f"torchpact: cannot write {path} ({exc.strerror or exc}); the {what} is in {fallback}",
              file=sys.stderr)
        return False
    if what != "report":
        print(f"torchpact: {what} written to {path}", file=sys.stderr)
    return True


def write_html(path: str | None, findings: list[Finding], meta: dict[str, Any]) -> None:
    """``--html FILE``: the self-contained page, beside whatever --format writes."""
    if not path:
        return
    from torchpact.report import render

    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(render("html", findings, meta))
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    print(f"torchpact: HTML report written to {path}", file=sys.stderr)


def cmd_report(args: argparse.Namespace) -> int:
    """Render a saved JSON report again: as a page (--html) and/or in --format."""
    import json

    from torchpact.report import render

    try:
        with open(args.json_report, encoding="utf-8") as fh:
            doc = json.load(fh)
        findings = [Finding.from_dict(f) for f in doc["findings"]]
    except OSError as exc:
        raise UsageError(f"cannot read {args.json_report}: {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{args.json_report} is not a torchpact JSON report "
                         f"({exc.__class__.__name__}: {exc})") from None
    summary = {k: v for k, v in (doc.get("summary") or {}).items()
               if k not in ("total", "by_severity", "by_code", "by_category")}
    meta: dict[str, Any] = {"command": doc.get("command"), "torch": doc.get("torch"), "summary": summary,
                            "color": args.format == "text" and not args.output and use_color_stdout()}
    if args.format == "sarif" or args.html:
        from torchpact.docs import rule_table

        meta["rules"] = rule_table(include_runtime=True)  # a saved report may hold runtime codes
    if args.html:
        from torchpact.report.html import page, rule_texts

        try:
            with open(args.html, "w", encoding="utf-8") as fh:
                fh.write(page(doc, rules=rule_texts(meta["rules"])))
        except OSError as exc:
            raise UsageError(f"cannot write {args.html}: {exc.strerror or exc}") from None
        if not args.output and args.format == "text":
            print(f"torchpact: HTML report written to {args.html}", file=sys.stderr)
            return exit_code(findings, args.fail_on)
    emit(render(args.format, findings, meta), args.output)
    return exit_code(findings, args.fail_on)


def use_color_stdout() -> bool:
    from torchpact.report.text import use_color

    return use_color()


def cmd_server() -> int:
    try:
        import lsprotocol  # noqa: F401
        import pygls  # noqa: F401
    except ImportError:
        raise UsageError("torchpact server needs pygls: pip install 'torchpact[server]'") from None
    from torchpact.server import serve

    return serve()


def cmd_rule(args: argparse.Namespace) -> int:
    from torchpact.docs import page

    text = page(args.code)
    if text is None:
        raise UsageError(f"no rule {args.code}; `torchpact rules` lists them")
    print(text, end="")
    return EXIT_OK


def plural(n: int, word: str, words: str | None = None) -> str:
    """``1 file``, ``2 files``."""
    return f"{n} {word if n == 1 else words or word + 's'}"


def cmd_rules() -> int:
    from torchpact.docs import runtime_checks
    from torchpact.lint.registry import all_rules

    from torchpact.lint.preview import is_preview

    checks = runtime_checks()
    for r in all_rules():
        fix = ("unsafe" if r.unsafe_fix else "fix") if r.fixable else ""
        check = checks.get(r.code)
        by = "lint+run" if check else "lint    "
        default = "preview" if is_preview(r.code, r.severity) else "on"
        print(f"{r.code}  {r.severity.value:<7}  {default:<7}  {r.category.value:<11}  {by}  {fix:<6}  {r.name():<36} "
              f"{r.summary()}")
        if check is not None and (check.severity != r.severity or check.severity_note):
            print(_runtime_severity_line(check, differs=check.severity != r.severity))
    lint_codes = {r.code for r in all_rules()}
    run_only = 0
    for code, c in sorted(checks.items()):
        if code not in lint_codes:
            run_only += 1
            print(f"{code}  {c.severity.value:<7}  {'':<7}  {c.category.value:<11}  run               "
                  f"{'':<36} {c.summary}")
            if c.severity_note:
                print(_runtime_severity_line(c, differs=False))
    from torchpact.lint.docs import SPECIAL_SEVERITY, special_codes

    special = special_codes()
    for code, text in sorted(special.items()):  # lint and run report them; no rule of their own
        title = text.splitlines()[0].split("— ", 1)[1]
        default = "off" if code == "TP005" else "on"  # TP005 runs only when selected by name
        found_by = "lint" if code == "TP005" else "lint+run"
        print(f"{code}  {SPECIAL_SEVERITY[code].value:<7}  {default:<7}  {'input':<11}  {found_by:<8}  "
              f"{'fix' if code == 'TP005' else '':<6}  {'':<36} {title}")
    shared = len(lint_codes & set(checks))
    print(f"\n{plural(len(lint_codes), 'lint rule')} ({shared} also checked at run time), "
          f"{plural(run_only, 'runtime check')} of their own, {plural(len(special), 'code')} of lint itself "
          f"({', '.join(sorted(special))}).")
    print("\nfix: --fix applies it; unsafe: it may change what the program does, so --fix applies it only with "
          "--unsafe-fixes (see the rule's Fix safety).")
    print("preview: lint reports the rule's error and warning findings only with --preview (or its code in "
          "--select) until their blind precision is measured above the bar; its info findings, and `on` rules, by "
          "default. `torchpact rule TPnnn` shows the measure.")
    return EXIT_OK


def _runtime_severity_line(check: Any, differs: bool) -> str:
    """The indented line under a code whose runtime findings are reported at another severity."""
    parts = [f"at run time: {check.severity.value}"] if differs else []
    if check.severity_note:
        parts.append(check.severity_note.replace("`", ""))
    return "       " + "; ".join(parts)


def bundled_examples() -> Path | None:
    """The examples shipped inside the package (``examples/`` of a clone links to the same folder)."""
    folder = Path(__file__).resolve().parent / "examples"
    if not folder.is_dir():
        return None
    link = Path("examples")  # in a clone's root: the shorter name of the same folder
    return link if link.is_dir() and link.resolve() == folder else folder


TORCH_INSTALL = "pip install 'torchpact[torch]'"
# The torch versions the runtime commands are tested on (pyproject's [torch] extra states the same range,
# tests/test_torch_range.py keeps them one): the whole suite on 2.13, `torchpact facts` and the watchers'
# tests on 2.14.
TORCH_TESTED = ((2, 13), (2, 15))  # from, up to (excluded)


def torch_support_note(version: str | None) -> str | None:
    """One line for a runtime command on a torch outside the tested range, else None."""
    from torchpact.project import parse_version

    found = parse_version(version or "")
    low, high = TORCH_TESTED
    if found is None or low <= found < high:
        return None
    return (f"torchpact: note: torch {version} is outside the versions torchpact is tested on "
            f"(>={low[0]}.{low[1]},<{high[0]}.{high[1]}): a check may miss or misread what changed; "
            "`torchpact facts` shows which documented torch behaviours hold here")


def note_untested_torch() -> None:
    note = torch_support_note(installed_torch_version())
    if note:
        print(note, file=sys.stderr)


def has_torch() -> bool:
    """Whether torch can be imported here, without importing it (lint-only installs have none)."""
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def require_torch(command: str) -> None:
    """A one-line usage error (exit 2) for a command that needs torch where torch is not installed; a
    one-line note when the installed torch is outside the tested range."""
    if not has_torch():
        raise UsageError(f"{command} needs torch, which is not installed for {sys.executable}: {TORCH_INSTALL} "
                         "(lint, rule, rules, facts --list and report work without it)")
    note_untested_torch()


def cmd_audit(args: argparse.Namespace) -> int:
    """export-check / compile-check: load the target (a bad one is a usage error), check, report."""
    from torchpact.report import render

    require_torch(args.command)
    import torch
    from torchpact.audit import footer
    from torchpact.audit.target import TargetError, load_target

    export = args.command == "export-check"
    chosen = _split(args.paths if export else args.modes)
    if export:
        from torchpact.audit.export import PATHS, export_check as check
        unknown = set(chosen) - set(PATHS)
    else:
        from torchpact.audit.compile import CPU_MODES, CUDA_MODES, compile_check as check
        unknown = set(chosen) - set(CPU_MODES + CUDA_MODES)
    if unknown:
        name = sorted(unknown)[0]
        from torchpact.config import closest

        hint = closest(name, PATHS if export else CPU_MODES + CUDA_MODES)
        raise UsageError(f"unknown {'path' if export else 'mode'}(s): {', '.join(sorted(unknown))}{hint}")
    try:
        target = load_target(args.target)
    except TargetError as exc:
        raise UsageError(str(exc)) from None
    progress = (lambda s: print(f"torchpact {args.command}: {s}...", file=sys.stderr, flush=True)) \
        if sys.stderr.isatty() else None
    if args.threads is not None and args.threads < 1:
        raise UsageError("--threads must be >= 1")
    if export:
        result = check(target, paths=tuple(chosen) or PATHS, progress=progress, threads=args.threads)
    else:
        result = check(target, modes=tuple(chosen) or None, progress=progress, threads=args.threads)
    summary = result.summary()
    meta: dict[str, Any] = {"command": f"{args.command} {args.target}", "torch": torch.__version__,
                            "summary": summary,
                            "color": args.format == "text" and not args.output and use_color_stdout()}
    if args.format == "sarif" or args.html:
        from torchpact.docs import rule_table

        meta["rules"] = rule_table(include_runtime=True)
    if args.format == "text":
        meta["footer"] = (footer.export_footer if export else footer.compile_footer)(summary, args.target)
    code = exit_code(result.findings, args.fail_on)
    meta["summary"].update(torchpact_exit_code=code, fail_on=args.fail_on)
    write_html(args.html, result.findings, meta)
    emit(render(args.format, result.findings, meta), args.output)
    return code


def cmd_demo(args: argparse.Namespace) -> int:
    folder = Path(args.path) if args.path else bundled_examples()
    if folder is None or not folder.is_dir():
        raise UsageError("bundled examples not found; pass the examples folder: torchpact demo PATH")
    rel = _shown(folder)
    # the examples' bugs are found by rules still in preview (their blind precision is not measured yet)
    print(f"== torchpact lint --preview {rel}\n", flush=True)
    code = main(["lint", "--preview", str(rel)])
    if code not in (EXIT_OK, EXIT_FINDINGS):
        return code
    if not has_torch():
        print(f"\n(torch is not installed here: the rest of the demo, `torchpact run` and `export-check` on these "
              f"examples, needs it: {TORCH_INSTALL})")
        return EXIT_OK
    script = folder / "train_classifier.py"
    if script.is_file():
        print(f"\n== torchpact run {_shown(script)}\n", flush=True)
        code = main(["run", _shown(script)])
        if code not in (EXIT_OK, EXIT_FINDINGS):
            return code
    target = folder / "export_target.py"
    if target.is_file():
        spec = f"{_shown(target)}:make"
        print(f"\n== torchpact export-check {spec}\n", flush=True)
        code = main(["export-check", spec])
        if code not in (EXIT_OK, EXIT_FINDINGS):
            return code
    print("\n(the examples carry these bugs on purpose: every finding above is expected; lint ran with --preview, "
          "which also reports the rules whose blind precision is not yet measured)")
    return EXIT_OK


def _shown(path: Path) -> str:
    """A path relative to the working directory when it is under it (a clone), else absolute (an installed wheel)."""
    rel = os.path.relpath(path)
    return str(path) if rel.startswith("..") else rel


def cmd_facts(args: argparse.Namespace) -> int:
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
            print(json.dumps([{"id": f.id, "area": f.area, "claim": f.claim, "expected": f.expected,
                               "requires": f.requires, "rules": links.get(f.id, [])} for f in selected], indent=2))
        else:
            sys.stdout.write(report.listing(selected, links))
        return EXIT_OK
    require_torch("facts" if not args.id else f"facts {args.id}")  # each experiment runs torch
    progress = sys.stderr.isatty() and not args.json and len(selected) > 1
    if progress:
        print(f"running {len(selected)} experiments...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    outcomes = run_facts(selected, jobs=args.jobs, timeout_s=args.timeout)
    seconds = time.perf_counter() - start
    torch_version = next((o.torch for o in outcomes if o.torch), None)
    if args.json:
        from torchpact import __version__

        command = "facts" + (f" {args.id}" if args.id else "")
        sys.stdout.write(report.as_json(outcomes, links, {"version": __version__, "torch": torch_version,
                                                          "command": command, "seconds": round(seconds, 3)}))
    elif args.id:
        sys.stdout.write(report.detail(outcomes[0], links))
    else:
        sys.stdout.write(report.text(outcomes, links, torch_version, seconds))
    bad = any(o.changed or o.verdict in (FAILED, TIMED_OUT) for o in outcomes)
    return EXIT_FINDINGS if bad else EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
