"""`torchpact run --nproc`: one report from every rank, and a crashing rank ends the job promptly."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

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
dist.barrier()
dist.destroy_process_group()
"""


def _run(tmp_path, *args):
    script = tmp_path / "ddp.py"
    script.write_text(textwrap.dedent(SCRIPT))
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "torchpact", "run", "--quiet", "--nproc", "2", "--format", "json",
                          str(script), *args], capture_output=True, text=True, timeout=180)
    return out, json.loads(out.stdout), time.perf_counter() - start


def test_crashing_rank_is_reported_and_job_fails_promptly(tmp_path):
    out, report, seconds = _run(tmp_path, "crash")
    assert out.returncode == 1, out.stderr[-2000:]
    assert seconds < 90
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
