"""Checks that compare ranks reach the same verdict however slowly each rank runs.

One rank is slowed on purpose (``time.sleep`` in the script): the rank whose values the others
compare against starts training late, or a straggler ends late. The tests assert the verdict — the
finding, or a "not compared" note when a deadline is set short on purpose — never a duration. Every
launch of this module starts at once, in a module fixture (each costs seconds of start-up).
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

DEADLINE_S = 600  # a bound against a hang, far above what a loaded 2-core machine needs

SCRIPT = textwrap.dedent('''
    import sys
    import time

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    mode, slow = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    ddp = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    torch.manual_seed(rank)  # each rank its own data
    if mode == "bypass" and rank == slow:
        time.sleep(8.0)  # this rank starts training late: a loaded machine, a slower device, a longer setup
    for step in range(20 if mode == "straggler" else 5):
        if mode == "straggler" and rank == slow:
            time.sleep(0.1)  # this rank loads its data slowly: every rank waits for it in backward
        x = torch.randn(16, 8)
        out = ddp.module(x) if mode == "bypass" else ddp(x)  # .module: no gradient all-reduce, replicas drift
        loss = out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    if mode == "straggler" and rank == slow:
        time.sleep(8.0)  # and it ends late
    dist.destroy_process_group()
''')

PLANS = {  # name: (watchers, script arguments, extra environment)
    "first_rank_late": ("ddp_sync", ["bypass", "0"], {}),
    "other_rank_late": ("ddp_sync", ["bypass", "1"], {}),
    "deadline_too_short": ("ddp_sync", ["bypass", "0"], {"TORCHPACT_EXCHANGE_WAIT": "2"}),
    "straggler_ends_late": ("ddp_straggler", ["straggler", "1"], {}),
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, tuple[int, str, dict]]:
    tmp = tmp_path_factory.mktemp("verdicts")
    script = tmp / "train.py"
    script.write_text(SCRIPT)
    procs = {}
    for name, (watchers, args, env) in PLANS.items():
        cmd = [sys.executable, "-m", "torchpact", "run", "--quiet", "--nproc", "2", "--sample-every", "1",
               "--watchers", watchers, "--format", "json", "--output", str(tmp / f"{name}.json"), str(script), *args]
        procs[name] = subprocess.Popen(cmd, cwd=tmp, env=dict(os.environ, **env), stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True, start_new_session=True)
    start, out = time.monotonic(), {}
    try:
        for name, proc in procs.items():
            _, stderr = proc.communicate(timeout=max(1.0, DEADLINE_S - (time.monotonic() - start)))
            out[name] = (proc.returncode, stderr, json.loads((tmp / f"{name}.json").read_text()))
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return out


def _codes(report: dict) -> list[str]:
    return sorted(f["code"] for f in report["findings"])


@pytest.mark.parametrize("name", ["first_rank_late", "other_rank_late"])
def test_drifting_replicas_are_found_whichever_rank_is_late(reports, name):
    code, stderr, report = reports[name]
    assert code == 1, (report["findings"], report.get("ranks"), stderr[-3000:])
    assert _codes(report) == ["TP602"], report["findings"]
    [bypass] = report["findings"]
    assert "`ddp.module(...)`" in bypass["message"] and bypass["extra"]["ranks"] == [1]


def test_a_comparison_that_cannot_wait_long_enough_says_so(reports):
    code, stderr, report = reports["deadline_too_short"]
    assert code == 0, stderr[-3000:]  # an info: no verdict either way
    assert _codes(report) == ["TP658"], report["findings"]
    [note] = report["findings"]
    assert note["severity"] == "info" and note["extra"]["not_compared"] == "ddp_sync"
    assert note["extra"]["reason"] == "timeout"
    assert "did not compare the gradients and parameters of `Linear` with rank 0's at step 0" in note["message"]


def test_a_straggler_that_ends_late_is_still_compared(reports):
    code, stderr, report = reports["straggler_ends_late"]
    assert code == 0, stderr[-3000:]  # TP654 is a warning
    assert _codes(report) == ["TP654"], report["findings"]
    [straggler] = report["findings"]
    assert straggler["extra"]["straggler"] == 1 and straggler["extra"]["phase"] == "data"
