"""`torchpact run --nproc`: one report from every rank, and a crashing rank ends the job promptly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import signal
import textwrap
import time
from pathlib import Path

SCRIPT = """
import sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    opt.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
if sys.argv[1:] == ["crash"] and rank == 1:
    raise ValueError("boom on rank 1")
if sys.argv[1:] == ["sigkill"] and rank == 1:
    import os
    os.kill(os.getpid(), 9)
dist.barrier()
dist.destroy_process_group()
"""


def _run(tmp_path, *args, source=SCRIPT, env=None):
    script = tmp_path / "ddp.py"
    script.write_text(textwrap.dedent(source))
    report = tmp_path / "report.json"
    out = subprocess.run([sys.executable, "-m", "torchpact", "run", "--quiet", "--nproc", "2", "--format", "json",
                          "--output", str(report), str(script), *args], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, **(env or {})))
    return out, json.loads(report.read_text())


def test_crashing_rank_is_reported_and_job_fails_promptly(tmp_path):
    # promptly: the launcher stops the job when rank 1 dies, instead of rank 0 waiting for its collective
    # timeout (30 minutes); the subprocess's timeout bounds it
    out, report = _run(tmp_path, "crash")
    assert out.returncode == 1, out.stderr[-2000:]
    by_code = {}
    for f in report["findings"]:
        by_code.setdefault(f["code"], []).append(f)
    [failed] = by_code["TP004"]
    assert failed["rank"] == 1 and "rank 1 failed" in failed["message"]
    crashes = {f["rank"]: f for f in by_code["TP003"]}
    assert "boom on rank 1" in crashes[1]["message"]
    assert crashes[1]["line"] == 17
    if 0 in crashes:  # rank 0 lost its peer in the barrier: explained as a consequence
        assert "another rank of the job died" in crashes[0]["message"]
    ranks = {r["rank"]: r for r in report["summary"]["ranks"]}
    assert set(ranks) == {0, 1} and ranks[1]["exit_code"] == 1 and ranks[1]["steps"] == 3
    assert "ValueError: boom on rank 1" in out.stderr  # the rank's own traceback reaches the user


def test_a_rank_killed_by_a_signal_gives_the_exit_code_a_shell_shows(tmp_path):
    # 128 + 9, as a single-process run killed by SIGKILL (tests/launch/test_supervised_run.py)
    out, report = _run(tmp_path, "sigkill")
    assert out.returncode == 137, out.stderr[-2000:]
    [failed] = [f for f in report["findings"] if f["code"] == "TP004" and f["severity"] == "error"]
    assert failed["rank"] == 1 and "rank 1 failed (signal 9)" in failed["message"]
    assert report["summary"]["torchpact_exit_code"] == 137


# ---------------------------------------------------------------------------------- no rank left behind
def _gone(pid: int) -> bool:
    """Dead, or a zombie waiting for a parent that does not reap (PID 1 in some containers)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _wait_for(predicate, bound_s: float) -> bool:
    """Poll ``predicate`` until it holds or ``bound_s`` passes (a bound against hanging, not a timing check)."""
    deadline = time.monotonic() + bound_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


PIDS = """
import os, sys
open(os.path.join(sys.argv[1], f"pid{os.environ['RANK']}"), "w").write(str(os.getpid()))
"""


def test_a_rank_stuck_at_exit_is_stopped_once_every_script_has_finished(tmp_path):
    stuck = SCRIPT + PIDS + """
import threading
if rank == 1:
    threading.Thread(target=threading.Event().wait).start()  # a non-daemon thread: the interpreter never exits
"""
    # rank 1 never exits; rank 0 exits by itself, well within the grace (torch's teardown takes about a second)
    out, report = _run(tmp_path, str(tmp_path), source=stuck, env={"TORCHPACT_EXIT_GRACE": "20"})
    assert out.returncode == 0, out.stderr[-2000:]
    [lingered] = [f for f in report["findings"] if f["code"] == "TP004"]
    assert lingered["rank"] == 1 and lingered["severity"] == "warning" and "stopped it" in lingered["message"]
    assert {r["rank"]: r["exit_code"] for r in report["summary"]["ranks"]} == {0: 0, 1: 0}
    assert _wait_for(lambda: _gone(int((tmp_path / "pid1").read_text())), 30)


def test_killing_the_launcher_leaves_no_rank_behind(tmp_path):
    script = tmp_path / "forever.py"
    script.write_text(textwrap.dedent(PIDS + """
import time
while True:
    time.sleep(0.1)
"""))
    launcher = subprocess.Popen([sys.executable, "-m", "torchpact", "run", "--quiet", "--nproc", "2", str(script),
                                 str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    pids: list[int] = []
    try:
        assert _wait_for(lambda: all((tmp_path / f"pid{r}").exists() for r in (0, 1)), 240)
        pids = [int((tmp_path / f"pid{r}").read_text()) for r in (0, 1)]
        assert all(os.getsid(p) != launcher.pid for p in pids)  # each rank runs in a session of its own
        launcher.kill()  # SIGKILL: the launcher cannot clean up after itself
        launcher.wait(timeout=30)
        assert _wait_for(lambda: all(_gone(p) for p in pids), 30), "ranks survived the launcher"
    finally:
        for pid in pids:
            if not _gone(pid):
                os.killpg(pid, signal.SIGKILL)
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait(timeout=30)
