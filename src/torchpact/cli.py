"""Command line: argument parsing and the table of commands; nothing else. Each command
(``torchpact.commands.<name>``) returns an ``Outcome``, and ``commands.outcome.finish`` is the one place that
writes it out and decides the exit code.

Exit codes: 0 no finding at or above ``--fail-on``; 1 findings at or above it; 2 usage error or bad
input to torchpact itself. ``run`` keeps the exit code of a script that failed: its own, or 128 + N
for a script (or, with ``--nproc``, the first rank) killed by signal N, as a shell shows it.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, NamedTuple, Sequence

from torchpact.commands.outcome import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, Outcome, UsageError, finish
from torchpact.findings import Severity

__all__ = ["EXIT_FINDINGS", "EXIT_OK", "EXIT_USAGE", "UsageError", "build_parser", "main"]
# torchpact.watch.Sampler's schedule and budget (not imported: lint starts without it)
SAMPLE_FIRST, SAMPLE_EVERY, SAMPLED_CALLS, SAMPLED_SHARE, SAMPLED_CHARGE, SAMPLE_SPREAD = 10, 20, 2000, 0.01, 12, 10
FORMAT_CHOICES = ("text", "json", "sarif", "github")


class Command(NamedTuple):
    """A command of the command line: its help, its options, and where its ``execute`` is (imported only when
    it runs: ``run`` starts without lint's modules and lint without torch's)."""

    help: str
    description: str | None
    add_options: Callable[[argparse.ArgumentParser], object]
    module: str  # torchpact.commands.<module>
    function: str = "execute"  # (args) -> Outcome

    def execute(self, args: argparse.Namespace) -> Outcome:
        import importlib

        outcome: Outcome = getattr(importlib.import_module(f"torchpact.commands.{self.module}"), self.function)(args)
        return outcome


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
                     help=f"then on every N-th step (default: {SAMPLE_EVERY}; past {SAMPLE_SPREAD}*N steps the gap "
                          "doubles each time the step count doubles), and on the steps that follow one "
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


def _audit_command(name: str, what: str) -> Command:
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
    return Command(what, (f"{what}. TARGET is FILE.py:FUNC or package.module:FUNC; FUNC returns (model, args) or "
                          "(model, args, kwargs)."), add, "audit")


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


def _lint_options(lint: argparse.ArgumentParser) -> None:
    from torchpact.commands.lint import add_options

    add_options(lint)


COMMANDS: dict[str, Command] = {
    "lint": Command("static checks of PyTorch code (never imports torch)", None, _lint_options, "lint"),
    "run": Command("run a training script under the watchers",
                   "Runs SCRIPT (or MODULE, as python -m does) unmodified as __main__ with its own ARGS, under "
                   "torchpact's watchers.", _run_options, "run"),
    "export-check": _audit_command("export-check", "trace / script / torch.export / ONNX parity on varied inputs"),
    "compile-check": _audit_command("compile-check",
                                    "torch.compile graph breaks, recompiles, latency per mode, parity"),
    "report": Command("render a saved JSON report again (--html page, or another --format)",
                      "Reads a report written by `--format json` and renders it as an HTML page (--html) "
                      "and/or in --format (default text).", _report_options, "report"),
    "rule": Command("show a rule's documentation", None,
                    lambda rule: rule.add_argument("code", metavar="TPnnn"), "rules", "execute_rule"),
    "rules": Command("list every rule", None, lambda rules: None, "rules", "execute_rules"),
    "demo": Command("lint the bundled examples and show what torchpact finds", None,
                    lambda demo: demo.add_argument("path", nargs="?",
                                                   help="examples folder (default: the bundled one)"), "demo"),
    "server": Command("a Language Server (LSP) over stdio: lint's findings, fixes and rule pages in the editor",
                      "Speaks the Language Server Protocol on stdin/stdout (docs/editors.md). Needs the extra: "
                      "pip install 'torchpact[server]'.",
                      lambda server: server.add_argument(
                          "--stdio", action="store_true",
                          help="accepted for editors that pass it; stdio is the only transport"),
                      "server"),
    "facts": Command("check common PyTorch advice against the installed torch",
                     "Runs one small experiment per claim, each in its own process, and prints the verdict "
                     "on the installed torch, its evidence and the rules that rest on it. Exit 1 when a "
                     "verdict differs from the supported torch's or an experiment failed.", _facts_options, "facts"),
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
    for name, c in COMMANDS.items():
        if command is None or command == name:
            c.add_options(sub.add_parser(name, help=c.help, description=c.description))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The command line. Without ``argv`` this is the program (``torchpact``, ``python -m torchpact``): `run`
    then runs the script in a child process and reports from this one, which outlives it (see
    ``launch.supervise``). With ``argv``, called from Python, every command runs in the calling process."""
    own_process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    args.own_process = own_process  # run: supervise the script from this process, which outlives it
    try:
        outcome = COMMANDS[args.command].execute(args)
        code = finish(outcome)
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
    if own_process and outcome.supervised:
        _end_now(code)
    return code


def _end_now(code: int) -> None:
    """End the process that supervised ``run``'s child, now that the report is out, without the interpreter's
    teardown: it ran none of the script's code, and freeing its modules' objects one by one (~15 ms) is all a
    normal exit would add to the atexit handlers and the flush of the streams done here. A thread still
    running (none of torchpact's) gets the normal exit, which waits for it."""
    import threading

    if any(t is not threading.main_thread() and not t.daemon for t in threading.enumerate()):
        return
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


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


def plural(n: int, word: str, words: str | None = None) -> str:
    """``1 file``, ``2 files``."""
    return f"{n} {word if n == 1 else words or word + 's'}"


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


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
