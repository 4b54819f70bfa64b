"""Runs one script (or, as ``python -m``, a module) as ``__main__`` (runpy, its own argv) under a watch session.

The script behaves as under plain python: ``sys.argv``, ``sys.path[0]``, ``__file__``, relative
paths, ``sys.exit()`` and DataLoader workers all work. Whatever happens — an exception, ``sys.exit``,
Ctrl-C — the hooks are removed, the findings are returned and the script's exit code is kept.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
import time
import traceback
from typing import Any, Iterable

from torchpact.findings import Finding
from torchpact.launch.target import LaunchError, check_script, find_module
from torchpact.launch.warning_origin import as_without_torchpact
from torchpact.watch import Sampler, Session, watch
from torchpact.watch.frames import user_location


class Terminated(BaseException):
    """Raised in the script's main thread on SIGTERM (a launcher or a scheduler stopping the run)."""


def _terminate(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: writing the report must not be cut by a second one
    raise Terminated()


def _catch_sigterm() -> Any:
    """Turn SIGTERM into :class:`Terminated` in the main thread; returns the handler to restore (None if not set)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _terminate)


class RunOutcome:
    """What a watched run produced. A plain class, not a ``@dataclass``, for the reason ``Finding`` is one."""

    def __init__(self, script: str, exit_code: int, findings: list[Finding] | None = None, seconds: float = 0.0,
                 steps: int = 0, step_times: list[float] | None = None, error: str | None = None,
                 session: Session | None = None, ranks: list[dict[str, Any]] | None = None,
                 data: dict[str, Any] | None = None, torch: str | None = None) -> None:
        self.script = script
        self.exit_code = exit_code
        self.findings: list[Finding] = [] if findings is None else findings
        self.seconds = seconds
        self.steps = steps
        self.step_times: list[float] = [] if step_times is None else step_times
        self.error = error
        self.session = session
        self.ranks = ranks  # per-rank facts of a distributed run
        self.data: dict[str, Any] = {} if data is None else data  # watcher name -> plain data (series) for reports
        self.torch = torch  # the version the script ran with

    def summary(self) -> dict[str, Any]:
        out = {"script": self.script, "exit_code": self.exit_code, "seconds": round(self.seconds, 3),
               "steps": self.steps, "error": self.error}
        if self.ranks is not None:
            out["ranks"] = self.ranks
        if self.data:
            out["data"] = self.data  # the series reports plot (watcher name -> data)
        return out


def _exit_code(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message") prints the message and exits 1
    return 1


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def is_torchpact_frame(filename: str) -> bool:
    """Frames the user's tracebacks and warnings must not show: torchpact's own, and runpy's (which ran the script)."""
    if filename in ("<frozen runpy>", "<frozen importlib._bootstrap>") or os.path.basename(filename) == "runpy.py":
        return True
    return os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep)


def format_user_exception(exc: BaseException) -> str:
    """The traceback Python would print for the script run directly: torchpact's and runpy's frames left out,
    also in chained exceptions (a syntax error in the script then shows as Python shows it: no frames)."""
    top = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    todo, seen = [top], set()
    while todo:
        te = todo.pop()
        if id(te) in seen:
            continue
        seen.add(id(te))
        te.stack = traceback.StackSummary.from_list(_without_torchpact(list(te.stack)))
        todo += [c for c in (te.__cause__, te.__context__, *(getattr(te, "exceptions", None) or ())) if c is not None]
    return "".join(top.format())


def _without_torchpact(stack: list[traceback.FrameSummary]) -> list[traceback.FrameSummary]:
    """``stack`` without torchpact's frames, nor the dispatch into a watcher's ``__torch_function__`` mode:
    ``F.cross_entropy`` -> ``torch/overrides.py`` -> torchpact -> ``F.cross_entropy`` shows as one call."""
    out: list[traceback.FrameSummary] = []
    for i, frame in enumerate(stack):
        if not is_torchpact_frame(frame.filename):
            out.append(frame)
            continue
        after = stack[i + 1] if i + 1 < len(stack) else None
        while out and os.path.basename(out[-1].filename) == "overrides.py" and is_torch_file(out[-1].filename):
            out.pop()
        if after is not None and out and (out[-1].filename, out[-1].name) == (after.filename, after.name):
            out.pop()  # the call that dispatched to the mode; the call the mode made stands for it
    return out


def is_torch_file(filename: str) -> bool:
    import torch

    return os.path.abspath(filename).startswith(os.path.dirname(os.path.abspath(torch.__file__)) + os.sep)


def _print_user_traceback(exc: BaseException) -> None:
    sys.stderr.write(format_user_exception(exc))
    sys.stderr.flush()


def _crash_location(exc: BaseException, home: str) -> tuple[str | None, int | None]:
    """The innermost frame of the user's own code (under ``home``, the script's folder) in the traceback (for a
    syntax error: the offending line)."""
    found: tuple[str | None, int | None] = (None, None)
    script_dir = os.path.join(home, "")  # /x/proj/, not /x/proj2

    def own(filename: str) -> bool:
        filename = os.path.abspath(filename)
        return filename.startswith(script_dir) and "site-packages" not in filename

    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if own(frame.f_code.co_filename) and not is_torchpact_frame(frame.f_code.co_filename):
            found = (frame.f_code.co_filename, lineno)
    if isinstance(exc, SyntaxError) and exc.filename and not exc.filename.startswith("<") and own(exc.filename):
        found = (exc.filename, exc.lineno)
    return found


def _report_crash(session: Session, exc: BaseException, home: str) -> None:
    from torchpact.launch.explain import SCRIPT_ERROR, explain  # only a crash needs it: not at start-up

    path, line = _crash_location(exc, home)
    known = explain(exc)
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if known is not None:
        message = f"the script raised {type(exc).__name__}: {known.cause}"
        fix = known.fix + (f" (see `torchpact rule {known.related}`)" if known.related else "")
    else:
        message = f"the script raised {type(exc).__name__}: {first_line}"[:500]
        fix = "see the traceback above"
    session.report(SCRIPT_ERROR, message, fix=fix, path=path, line=line, key="crash",
                   error=f"{type(exc).__name__}: {first_line}"[:1000])


def run_script(script: str, argv: Iterable[str] = (), *, watchers: Iterable[Any] | None = None,
               sampler: Sampler | None = None, live: bool = True, module: bool = False,
               **session_options: Any) -> RunOutcome:
    """Run ``script`` with ``argv`` under the watchers; never raises for the script's own errors. With
    ``module``, ``script`` is a module name, run as ``python -m`` runs it (``sys.path[0]`` the working
    directory, ``sys.argv[0]`` the module's file)."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    if module:
        home = os.getcwd()
        sys.path[0:1] = [home]  # before the module is looked for: python -m finds it from here
        try:
            find_module(script)
        except LaunchError:
            sys.path[:] = saved_path
            raise
    else:
        check_script(script)
        path = os.path.abspath(script)
        home = os.path.dirname(path)
    try:
        session = watch(watchers, sampler=sampler, live=live, **session_options)
    except ValueError as exc:
        sys.path[:] = saved_path
        raise LaunchError(str(exc)) from None

    sys.argv = ["-m" if module else script, *argv]  # runpy puts the module's file in argv[0], as python -m
    sys.path[0:1] = [home]
    outcome = RunOutcome(script=f"-m {script}" if module else script, exit_code=0, session=session)
    start = time.perf_counter()
    session.start()
    previous_sigterm = _catch_sigterm()
    try:
        with as_without_torchpact():
            if module:
                runpy.run_module(script, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        outcome.exit_code = _exit_code(exc.code)
    except Terminated:
        outcome.exit_code = 128 + signal.SIGTERM  # what a shell reports for a process killed by SIGTERM
        outcome.error = "terminated (SIGTERM)"
        print("\ntorchpact: terminated (SIGTERM); reporting what was seen so far", file=sys.stderr)
    except KeyboardInterrupt:
        outcome.exit_code = 130
        outcome.error = "interrupted (Ctrl-C)"
        print("\ntorchpact: interrupted; reporting what was seen so far", file=sys.stderr)
    except BaseException as exc:  # the script's own error: print it as python would, then explain
        outcome.exit_code = 1
        outcome.error = f"{type(exc).__name__}: {exc}"[:1000]
        _print_user_traceback(exc)
        _report_crash(session, exc, home)
    finally:
        late: list[int] = []
        if previous_sigterm is not None:  # a SIGTERM while the hooks come off must not cut that short
            signal.signal(signal.SIGTERM, lambda signum, frame: late.append(signum))
        session.close()
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
        if late and outcome.exit_code == 0:
            outcome.exit_code, outcome.error = 128 + signal.SIGTERM, "terminated (SIGTERM)"
        sys.argv[:] = saved_argv
        sys.path[:] = saved_path
        outcome.seconds = time.perf_counter() - start
    outcome.findings = sorted(session.findings, key=lambda f: (f.step if f.step is not None else -1, f.code))
    outcome.steps = session.step
    outcome.step_times = list(session.step_times)
    outcome.data = session.data()
    outcome.torch = getattr(sys.modules.get("torch"), "__version__", None)
    return outcome


__all__ = ["LaunchError", "RunOutcome", "Terminated", "check_script", "find_module", "run_script", "user_location"]
