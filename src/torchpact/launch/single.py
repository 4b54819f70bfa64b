"""Runs one script as ``__main__`` (runpy, its own argv) under a watch session.

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
from dataclasses import dataclass, field
from typing import Any, Iterable

from torchpact.findings import Finding
from torchpact.launch.explain import SCRIPT_ERROR, explain
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


class LaunchError(Exception):
    """The script cannot be started (missing, a folder, unreadable): a one-line usage error."""


@dataclass
class RunOutcome:
    """What a watched run produced."""

    script: str
    exit_code: int
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0
    steps: int = 0
    step_times: list[float] = field(default_factory=list)
    error: str | None = None
    session: Session | None = None
    ranks: list[dict[str, Any]] | None = None  # per-rank facts of a distributed run
    data: dict[str, Any] = field(default_factory=dict)  # watcher name -> plain data (series) for reports

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


def _print_user_traceback(exc: BaseException, script: str) -> None:
    """The traceback Python would print, without torchpact's and runpy's frames on top."""
    tb = exc.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != script:
        tb = tb.tb_next
    lines = traceback.format_exception(type(exc), exc, tb or exc.__traceback__)
    sys.stderr.write("".join(lines))
    sys.stderr.flush()


def _crash_location(exc: BaseException, script: str) -> tuple[str | None, int | None]:
    """The innermost frame of the user's own code in the traceback."""
    found: tuple[str | None, int | None] = (None, None)
    script_dir = os.path.dirname(script)
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        filename = os.path.abspath(frame.f_code.co_filename)
        if filename.startswith(script_dir) and "site-packages" not in filename:
            found = (frame.f_code.co_filename, lineno)
    return found


def _report_crash(session: Session, exc: BaseException, script: str) -> None:
    path, line = _crash_location(exc, script)
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


def run_script(script: str, argv: Iterable[str] = (), *, watchers: Iterable[str] | None = None,
               sampler: Sampler | None = None, live: bool = True, **session_options: Any) -> RunOutcome:
    """Run ``script`` with ``argv`` under the watchers; never raises for the script's own errors."""
    path = os.path.abspath(script)
    if not os.path.exists(path):
        raise LaunchError(f"no such script: {script}")
    if os.path.isdir(path):
        raise LaunchError(f"{script} is a folder; give the training script's .py file")
    if not os.access(path, os.R_OK):
        raise LaunchError(f"cannot read {script}")
    try:
        session = watch(watchers, sampler=sampler, live=live, **session_options)
    except ValueError as exc:
        raise LaunchError(str(exc)) from None

    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [script, *argv]
    sys.path[0:1] = [os.path.dirname(path)]
    outcome = RunOutcome(script=script, exit_code=0, session=session)
    start = time.perf_counter()
    previous_sigterm = _catch_sigterm()
    session.start()
    try:
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
        _print_user_traceback(exc, path)
        _report_crash(session, exc, path)
    finally:
        session.close()
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
        sys.argv[:] = saved_argv
        sys.path[:] = saved_path
        outcome.seconds = time.perf_counter() - start
    outcome.findings = sorted(session.findings, key=lambda f: (f.step if f.step is not None else -1, f.code))
    outcome.steps = session.step
    outcome.step_times = list(session.step_times)
    outcome.data = session.data()
    return outcome


__all__ = ["LaunchError", "RunOutcome", "Terminated", "run_script", "user_location"]
