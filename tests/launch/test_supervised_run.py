"""A single-process `torchpact run` whose script dies without Python seeing it still reports.

The script is killed for real: SIGKILL sent to itself (what the kernel's OOM killer does), a real
segmentation fault (reading address 0 through ctypes), ``os._exit``. Each time after a finding was
reported (TP101 at step 6), so the report must hold it, and say how and when the process ended.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

SCRIPT = textwrap.dedent('''
    import os
    import sys

    import torch
    import torch.nn as nn

    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    total = 0
    for step in range(10):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss  # TP101, reported at step 6
    print("ten steps done", flush=True)
    how = sys.argv[1]
    if how == "sigkill":
        os.kill(os.getpid(), 9)
    elif how == "segfault":
        import ctypes
        ctypes.string_at(0)
    elif how == "exit":
        os._exit(int(sys.argv[2]))
    print("not reached")
''')


def _run(tmp_path, *args, fmt="json"):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    report = tmp_path / "report.json"
    out = subprocess.run([sys.executable, "-m", "torchpact", "run", "--quiet", "--format", fmt,
                          *(["--output", str(report)] if fmt == "json" else []), str(script), *args],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    return out, (json.loads(report.read_text()) if fmt == "json" else None)


@pytest.mark.parametrize("how, signum, words", [
    ("sigkill", signal.SIGKILL, "OOM killer"),
    ("segfault", signal.SIGSEGV, "segmentation fault"),
])
def test_a_script_killed_by_a_signal_keeps_its_findings(tmp_path, how, signum, words):
    out, report = _run(tmp_path, how)
    assert out.returncode == 128 + signum, out.stderr[-3000:]  # as a shell shows it
    assert out.stdout == "ten steps done\n"
    codes = [f["code"] for f in report["findings"]]
    assert codes == ["TP101", "TP003"], report["findings"]
    leak, died = report["findings"]
    assert leak["step"] == 6 and leak["line"] == 16
    assert died["severity"] == "error" and died["step"] == 10
    name = signal.Signals(signum).name
    assert f"killed by signal {int(signum)} ({name}) after 10 optimizer steps" in died["message"]
    assert words in died["message"]
    summary = report["summary"]
    assert summary["exit_code"] == summary["torchpact_exit_code"] == 128 + signum
    assert summary["steps"] == 10 and name in summary["error"]
    assert f"torchpact: killed by signal {int(signum)} ({name})" in out.stderr


def test_the_text_report_says_how_the_script_ended(tmp_path):
    out, _ = _run(tmp_path, "sigkill", fmt="text")
    assert out.returncode == 137
    report = out.stdout.split("== torchpact report", 1)[1]
    assert "TP101" in report and "TP003" in report and "killed by signal 9 (SIGKILL)" in report
    assert "exit code 137" in report


@pytest.mark.parametrize("code, severity, exit_code", [(3, "error", 3), (0, "info", 1)])
def test_os_exit_keeps_the_findings_and_the_exit_code(tmp_path, code, severity, exit_code):
    out, report = _run(tmp_path, "exit", str(code))
    # os._exit(0) is no failure (info), and TP101 makes torchpact's own code 1; os._exit(3) keeps its 3
    assert out.returncode == exit_code, out.stderr[-3000:]
    leak, died = report["findings"]
    assert leak["code"] == "TP101" and died["code"] == "TP003" and died["severity"] == severity
    assert f"exited with code {code} after 10 optimizer steps without Python's shutdown" in died["message"]
    assert report["summary"]["exit_code"] == code


def test_a_normal_end_is_reported_once_with_the_scripts_data(tmp_path):
    out, report = _run(tmp_path, "return")
    assert out.returncode == 1 and out.stdout == "ten steps done\nnot reached\n"
    assert [f["code"] for f in report["findings"]] == ["TP101"]
    assert report["summary"]["exit_code"] == 0 and report["summary"]["steps"] == 10
    assert report["torch"].startswith("2.")
    assert "progress" in report["summary"]["data"]  # the watchers' series come from the script's process


def test_the_parent_does_not_import_torch(tmp_path):
    # the report is assembled in a process that never imports torch: no second torch import at start-up
    script = tmp_path / "check.py"
    script.write_text("import os\nprint('script parent', os.getppid())\n")
    probe = textwrap.dedent(f'''
        import atexit, os, sys
        from torchpact.cli import main
        sys.argv = ["torchpact", "run", "-q", {str(script)!r}]
        # in both processes: the parent ends without the interpreter's teardown, but after the atexit handlers
        atexit.register(lambda: print("process", os.getpid(), "torch" in sys.modules, flush=True))
        main()
    ''')
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    lines = [ln.split() for ln in out.stdout.splitlines() if ln.strip()]
    [parent] = [ln[-1] for ln in lines if ln[:2] == ["script", "parent"]]
    seen = {ln[1]: ln[2] for ln in lines if ln[0] == "process"}
    assert seen.pop(parent) == "False", out.stdout + out.stderr
    assert list(seen.values()) == ["True"]  # the script's process


# ---------------------------------------------------------------------------------- signals
COUNTING = textwrap.dedent('''
    import signal
    import sys
    import time

    seen = []
    signal.signal(int(sys.argv[1]), lambda signum, frame: seen.append(signum))
    print("ready", flush=True)
    deadline = time.monotonic() + 60
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(1.0)  # a second copy of the signal would arrive by now
    print("signals received:", len(seen), flush=True)
''')


def test_a_signal_sent_to_torchpact_reaches_the_script_once(tmp_path):
    script = tmp_path / "count.py"
    script.write_text(COUNTING)
    proc = subprocess.Popen([sys.executable, "-m", "torchpact", "run", "-q", str(script), str(int(signal.SIGUSR1))],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGUSR1)  # to torchpact's process, as `kill PID` or a container stop does
        assert proc.stdout.readline().strip() == "signals received: 1"
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.stdout.close()


def test_ctrl_c_at_the_terminal_reaches_the_script_once(tmp_path):
    # The terminal sends SIGINT to every process of its foreground group, torchpact's and the script's:
    # torchpact must not pass on a copy of its own.
    import pty

    script = tmp_path / "count.py"
    script.write_text(COUNTING)
    pid, master = pty.fork()  # the child gets the pty as its controlling terminal, in the foreground
    if pid == 0:
        os.execv(sys.executable, [sys.executable, "-m", "torchpact", "run", "-q", str(script),
                                  str(int(signal.SIGINT))])
    output = b""
    try:
        while b"ready" not in output:
            output += os.read(master, 1024)
        os.write(master, b"\x03")  # Ctrl-C
        while b"signals received" not in output or not output.endswith(b"\n"):
            output += os.read(master, 1024)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(master)
    assert b"signals received: 1" in output, output
    assert os.waitstatus_to_exitcode(status) == 0


def test_which_signals_go_on_to_the_script():
    # Two copies of a signal that arrive together merge (one pending signal, one Python handler call), so the
    # test above passes either way; the rule itself, on siginfo as the kernel fills it:
    from torchpact.launch.supervise import passes_on

    SI_USER, SI_KERNEL, SI_TKILL = 0, 0x80, -6
    child = 4242

    def info(code, pid):  # (signo, code, errno, pid, uid, status, band)
        return signal.struct_siginfo((int(signal.SIGINT), code, 0, pid, 0, 0, 0))

    assert passes_on(info(SI_USER, 17), child)        # kill PID, timeout, a container stopping
    assert passes_on(info(SI_TKILL, 17), child)       # tgkill
    assert not passes_on(info(SI_KERNEL, 0), child)   # Ctrl-C at the terminal: the script has it already
    assert not passes_on(info(SI_USER, child), child)  # the script signalling torchpact


def test_killing_torchpact_kills_the_script_too(tmp_path):
    script = tmp_path / "forever.py"
    script.write_text("import os, time\nprint(os.getpid(), flush=True)\nwhile True:\n    time.sleep(0.1)\n")
    proc = subprocess.Popen([sys.executable, "-m", "torchpact", "run", "-q", str(script)], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    child = int(proc.stdout.readline())
    try:
        assert child != proc.pid
        proc.kill()  # SIGKILL: torchpact's process cannot pass anything on
        proc.wait(timeout=30)
        for _ in range(300):  # a bound against hanging, not a timing check
            if _gone(child):
                break
            time.sleep(0.1)
        assert _gone(child), "the script outlived torchpact"
    finally:
        proc.stdout.close()
        if not _gone(child):
            os.kill(child, signal.SIGKILL)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie nobody reaps (PID 1 in containers)
    except OSError:
        return True


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers_leave_the_report_alone(tmp_path, context):
    # forked workers inherit the journal: only the script's own process writes to it
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f'''
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        def main():
            data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
            model = torch.nn.Linear(4, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            total = 0
            loader = DataLoader(data, batch_size=4, num_workers=2, multiprocessing_context={context!r})
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += loss  # TP101

        if __name__ == "__main__":
            main()
    '''))
    report = tmp_path / "r.json"
    out = subprocess.run([sys.executable, "-m", "torchpact", "run", "-q", "--format", "json", "--output", str(report),
                          str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr[-3000:]
    doc = json.loads(report.read_text())
    codes = [f["code"] for f in doc["findings"]]
    assert codes.count("TP101") == 1 and not {"TP002", "TP003"} & set(codes), codes
    assert doc["summary"]["steps"] == 16
    assert doc["summary"]["exit_code"] == 0 and doc["summary"]["error"] is None
