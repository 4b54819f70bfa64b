"""Runtime TP657: DDP's gradient hooks lost to a device / dtype round trip after wrapping (gloo, one rank)."""

from __future__ import annotations


from tests.watch.util import run_source

SCRIPT = """
import os, sys
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

store = sys.argv[2]  # a FileStore: no TCP port that a parallel test could take first
assert not os.path.exists(store)
dist.init_process_group("gloo", init_method="file://" + store, rank=0, world_size=1)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
ddp = DDP(model)
if sys.argv[1] == "roundtrip":
    ddp.double()
    ddp.float()
else:
    ddp.to(torch.float32)  # a no-op conversion keeps the accumulators
calls = []

def counting_hook(state, bucket):  # DDP's all-reduce point for each gradient bucket
    calls.append(1)
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut

ddp.register_comm_hook(None, counting_hook)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad()
    ddp(torch.randn(4, 8)).pow(2).mean().backward()
    opt.step()
with open(sys.argv[3], "w") as f:
    f.write(str(len(calls)))
dist.destroy_process_group()
"""


def test_a_dtype_round_trip_after_wrapping_is_named_with_its_lines(tmp_path):
    calls = tmp_path / "calls"
    outcome = run_source(tmp_path, SCRIPT, ["ddp_hooks_lost"], args=["roundtrip", str(tmp_path / "store"), str(calls)],
                         name="roundtrip.py")
    assert calls.read_text() == "0"  # the consequence: DDP never reduces a gradient
    [f] = [f for f in outcome.findings if f.code == "TP657"]
    assert "converted after wrapping by the conversion at roundtrip.py:15, roundtrip.py:16" in f.message
    assert f.severity.value == "error" and f.line == 15


def test_no_conversion_or_a_no_op_one_is_silent(tmp_path):
    calls = tmp_path / "calls"
    outcome = run_source(tmp_path, SCRIPT, ["ddp_hooks_lost"], args=["same", str(tmp_path / "store"), str(calls)],
                         name="same.py")
    assert int(calls.read_text()) >= 3
    assert [f for f in outcome.findings if f.code == "TP657"] == []
