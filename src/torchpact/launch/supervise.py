"""`torchpact run` of one process, with a parent that outlives the script (Linux).

A script can end without Python seeing it: SIGKILL (what the kernel's OOM killer sends), a crash in
native code (a segfault), ``os._exit()``. No ``finally`` runs then, so a report written by the
script's own process would be lost with it. Instead the command line's process forks before torch
is imported: the child runs the script exactly as ``run_script`` does in-process (``__main__``, argv,
``sys.path[0]``, exit code, then the interpreter's own shutdown: atexit handlers, non-daemon
threads), and appends each finding to a journal the moment it is reported; the parent only waits,
then assembles the report from the journal, whether the child finished it or died.

Cost: a fork of the small process that parsed the command line (no second Python start, no torch
in the parent), one ``write`` per finding, one 8-byte store in shared memory per optimizer step. The
parent's objects go to the GC's permanent generation before the fork (the script's collections do not
walk them), and the parent ends without the interpreter's teardown once the report is out (``cli.main``).

Signals: the terminal's (Ctrl-C, Ctrl-\\) reach both processes; the parent leaves them to the
script. A signal sent to the parent by a process (``kill PID``, ``timeout``, a container stopping,
an IDE's stop button) is passed on to the script, as ``uv run`` and torchrun's agent do; a signal
sent to the whole process group therefore reaches the script twice. If the parent itself is killed,
the script is killed with it (``PR_SET_PDEATHSIG``), as the ranks of ``--nproc`` are.

Exit code: the script's; for a script killed by signal N, 128 + N, as a shell shows it (137 for
SIGKILL, 139 for a segfault), and as ``--nproc`` reports a rank killed by a signal.
"""

from __future__ import annotations

import gc
import json
import mmap
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Iterable

from torchpact.findings import Finding
from torchpact.launch.single import LaunchError, RunOutcome, check_script, run_script
from torchpact.watch import Sampler, Watcher, make_watchers

PR_SET_PDEATHSIG = 1
# The parent's part in a run: it waits in sigwaitinfo for these (blocked, so none is lost while it is
# not waiting). A tty-generated signal carries si_code SI_KERNEL (> 0); one sent by kill() SI_USER (0)
# or another code <= 0.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def available() -> bool:
    """Whether this platform supports the supervised run (Linux: fork, sigwaitinfo, memfd)."""
    return (sys.platform.startswith("linux") and hasattr(os, "fork") and hasattr(signal, "sigwaitinfo")
            and hasattr(os, "memfd_create"))


# ------------------------------------------------------------------------------------------- journal
class Journal:
    """The child's record of the run: a finding per JSON line as soon as it is reported, the outcome at
    the end (``{"end": ...}``), and the optimizer steps done in shared memory, kept up to date."""

    def __init__(self, fd: int, steps: mmap.mmap) -> None:
        self.fd = fd
        self.steps = steps
        self.pid = os.getpid()
        self._written = 0
        self._lock = threading.Lock()  # a watcher's thread may report while the main thread does

    def write(self, record: dict[str, Any]) -> None:
        if os.getpid() != self.pid:
            return  # a process the script forked (a DataLoader worker, os.fork()): its copy is not the run's
        data = (json.dumps(record) + "\n").encode()
        while data:
            data = data[os.write(self.fd, data):]

    def sink(self, session: Any) -> None:
        """``Session.sink``: append the findings not written yet."""
        if os.getpid() != self.pid:
            return
        with self._lock:
            new = session.findings[self._written:]
            self._written += len(new)
            for f in new:
                self.write({"finding": f.to_dict()})


class StepCounter(Watcher):
    """Keeps the number of optimizer steps done where the parent can read it after a hard death."""

    name = "torchpact-step-counter"

    def __init__(self, memory: mmap.mmap) -> None:
        super().__init__()
        self.memory = memory

    def on_step_end(self, step: int) -> None:
        self.memory[:8] = (step + 1).to_bytes(8, "little")


def read_journal(fd: int) -> tuple[list[Finding], dict[str, Any] | None]:
    """The findings the child wrote and its outcome record (None when it did not finish). A line cut
    short by the child's death is left out."""
    findings: list[Finding] = []
    end = None
    os.lseek(fd, 0, os.SEEK_SET)
    with os.fdopen(os.dup(fd), "rb") as fh:
        for line in fh:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if "finding" in record:
                findings.append(Finding.from_dict(record["finding"]))
            elif "end" in record:
                end = record["end"]
    return findings, end


# ------------------------------------------------------------------------------------------- processes
def die_with_parent(parent: int) -> None:
    """SIGKILL this process when ``parent`` dies (Linux); exit now if it already has."""
    try:
        import ctypes  # torch imports it anyway

        if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(128 + signal.SIGKILL)


def passes_on(info: Any, child: int) -> bool:
    """Whether a signal this process received goes on to the script: one a process sent (si_code <= 0:
    SI_USER for kill(), SI_QUEUE, SI_TKILL), not one the terminal sent to the whole foreground group
    (SI_KERNEL, > 0), which the script received too, nor one the script sent itself."""
    return info.si_code <= 0 and info.si_pid != child


def fork_and_wait(child: Callable[[], None]) -> int:
    """Run ``child()`` in a forked process (it must not return: it exits) and wait for it, passing on
    the signals sent to this process. Returns the exit code as a shell shows it (128 + N for signal N)."""
    watched = {signal.SIGCHLD, *FORWARDED}
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    previous_chld = signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # an inherited SIG_IGN would reap it for us
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    # What this process holds so far (torchpact's modules, the command line's: ~14,600 objects) goes to the GC's
    # permanent generation: the child's full collections, each of which walks every object of the script's
    # process, no longer walk these (a full collection with torch loaded: 122-132 ms instead of 140 ms). The
    # parent, which only waits, takes them back.
    gc.freeze()
    pid = os.fork()
    if pid == 0:
        try:
            signal.signal(signal.SIGCHLD, previous_chld)
            signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
            die_with_parent(parent)
        except BaseException:
            os._exit(70)  # EX_SOFTWARE: the child could not be set up
        child()
        os._exit(70)  # not reached: child() exits
    gc.unfreeze()
    try:
        while True:
            info = signal.sigwaitinfo(watched)
            if info.si_signo == signal.SIGCHLD:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done == pid:
                    break
            elif passes_on(info, pid):
                try:
                    os.kill(pid, info.si_signo)
                except ProcessLookupError:
                    pass
    finally:
        signal.signal(signal.SIGCHLD, previous_chld)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


# ------------------------------------------------------------------------------------------- the run
def run_supervised(script: str, argv: Iterable[str] = (), *, watchers: Iterable[Any] | None = None,
                   sampler: Sampler | None = None, live: bool = True, module: bool = False) -> RunOutcome:
    """``run_script`` in a child process; the outcome is assembled here, also when the child died hard.
    A module (``module``) is looked for in the child: finding it imports its packages, as python -m does."""
    if not module:
        check_script(script)
    if watchers is not None:
        watchers = list(watchers)
        if not all(isinstance(w, Watcher) for w in watchers):
            try:
                watchers = make_watchers(watchers)
            except ValueError as exc:
                raise LaunchError(str(exc)) from None
    fd = os.memfd_create("torchpact-run-journal", os.MFD_CLOEXEC)
    steps = mmap.mmap(-1, 8)  # anonymous and shared: the child's stores are seen here
    start = time.perf_counter()

    def child() -> None:
        journal = Journal(fd, steps)
        chosen = [*(watchers if watchers is not None else make_watchers(None)), StepCounter(steps)]
        try:
            outcome = run_script(script, list(argv), watchers=chosen, sampler=sampler, live=live, module=module,
                                 sink=journal.sink)
        except LaunchError as exc:
            journal.write({"end": {"launch_error": str(exc)}})
            raise SystemExit(2) from None
        journal.write({"end": {"exit_code": outcome.exit_code, "seconds": outcome.seconds, "steps": outcome.steps,
                               "error": outcome.error, "torch": outcome.torch, "data": outcome.data}})
        raise SystemExit(outcome.exit_code)  # the interpreter's own shutdown follows, as after the script

    try:
        code = fork_and_wait(child)
        findings, end = read_journal(fd)
        done = int.from_bytes(steps[:8], "little")
    finally:
        os.close(fd)
        steps.close()
    if end is not None and "launch_error" in end:
        raise LaunchError(end["launch_error"])
    seconds = time.perf_counter() - start
    outcome = RunOutcome(script=f"-m {script}" if module else script, exit_code=code, findings=findings,
                         seconds=seconds, steps=done)
    if end is not None:
        outcome.seconds, outcome.steps, outcome.error = end["seconds"], end["steps"], end["error"]
        outcome.torch, outcome.data = end.get("torch"), end.get("data") or {}
        if code != end["exit_code"] % 256:
            # the script had ended; its process then ended otherwise in the interpreter's shutdown (killed, a
            # crash of a native library, os._exit in an atexit handler)
            outcome.findings.append(ended_without_python(code, done, after_script=True))
            outcome.error = outcome.error or outcome.findings[-1].extra["ended"]
    else:
        died = ended_without_python(code, done)
        outcome.findings.append(died)
        outcome.error = died.extra["ended"]
        print(f"\ntorchpact: {died.extra['ended']}; reporting what was seen until then", file=sys.stderr)
    outcome.findings.sort(key=lambda f: (f.step if f.step is not None else -1, f.code))
    return outcome


def ended_without_python(code: int, steps: int, after_script: bool = False) -> Finding:
    """The TP003 finding for a process that ended without Python's shutdown."""
    from torchpact.launch.explain import SCRIPT_ERROR, process_end

    end = process_end(code, steps, after_script=after_script)
    return Finding(code=SCRIPT_ERROR.code, category=SCRIPT_ERROR.category, severity=end.severity,
                   message=end.message, fix=end.fix, step=steps, extra={"ended": end.ended})
