"""ddp_sync and post-local SGD, on 2 real gloo ranks: recognised by torch's PostLocalSGDState, not a hook's name.

After ``start_localSGD_iter``, ``post_localSGD_hook`` all-reduces the gradients within the state's subgroup only
(here each rank alone), so the replicas differ between a model averager's periods by design: not TP652, whatever
the script calls the hook. A hook that merely has "local" in its name all-reduces as DDP does, and parameters
changed on one rank after wrapping are still drift.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = '''
import datetime
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import PostLocalSGDState, post_localSGD_hook
from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
alone, _ = dist.new_subgroups(group_size=1)


class Net(nn.Module):
    def __init__(self, width):
        super().__init__()
        torch.manual_seed(0)
        self.body, self.head = nn.Linear(4, width), nn.Linear(width, 2)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


class Averaged(Net):
    pass


class Changed(Net):
    pass


def train(model, steps, after=None):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        x = torch.randn(8, 4, generator=torch.Generator().manual_seed(100 * step + rank))
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        if after:
            after()


def every_so_often(state, bucket):  # the script's own name for torch's post-local SGD hook
    return post_localSGD_hook(state, bucket)


local_sgd = DDP(Averaged(8))
local_sgd.register_comm_hook(PostLocalSGDState(None, alone, start_localSGD_iter=2), every_so_often)
averager = PeriodicModelAverager(period=4, warmup_steps=2)
train(local_sgd, 11, after=lambda: averager.average_parameters(local_sgd.parameters()))


def allreduce_local_copy(state, bucket):  # "local" in its name, but it all-reduces like DDP
    return allreduce_hook(state, bucket)


changed = DDP(Changed(6))
changed.register_comm_hook(None, allreduce_local_copy)
if rank == 0:
    with torch.no_grad():
        changed.module.body.weight.mul_(2)
train(changed, 6)
dist.destroy_process_group()
'''


def test_post_local_sgd_by_its_state_and_a_local_named_hook_still_checked(tmp_path):
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "torchpact", "run", "--quiet", "--format", "json", "--output",
                           str(out), "--watchers", "ddp_sync", "--sample-every", "1", "--nproc", "2",
                           str(tmp_path / "train.py")], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, TORCHPACT_SYNC_EVERY="3"))
    assert out.exists(), proc.stderr[-3000:]
    drift = [f for f in json.loads(out.read_text())["findings"] if f["code"] in ("TP602", "TP652")]
    assert [(f["code"], f["subject"]) for f in drift] == [("TP652", "Changed")], drift
    assert "body.weight" in drift[0]["extra"]["parameters"]
