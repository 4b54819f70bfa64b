"""Runtime TP656: an optimizer created before FSDP2's fully_shard (gloo, one rank)."""

from __future__ import annotations

import json

from tests.watch.util import run_source

SCRIPT = """
import json, os, sys
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard

store = sys.argv[2]  # a FileStore: no TCP port that a parallel test could take first
assert not os.path.exists(store)
dist.init_process_group("gloo", init_method="file://" + store, rank=0, world_size=1)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
before = sys.argv[1] == "before"
if before:
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for layer in (model[0], model[2]):
    fully_shard(layer)
fully_shard(model)
if not before:
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
start = [p.full_tensor().clone() for p in model.parameters()]
for _ in range(4):
    opt.zero_grad()
    model(torch.randn(4, 8)).pow(2).mean().backward()
    opt.step()
moved = any(not torch.equal(a, p.full_tensor()) for a, p in zip(start, model.parameters()))
with open(sys.argv[3], "w") as f:
    json.dump(moved, f)
dist.destroy_process_group()
"""


def _run(tmp_path, order):
    out = tmp_path / f"{order}.json"
    store = tmp_path / f"{order}.store"
    outcome = run_source(tmp_path, SCRIPT, ["fsdp_replaced_params", "optimizer"], args=[order, str(store), str(out)],
                         name=f"{order}.py")
    return outcome, json.loads(out.read_text())


def test_optimizer_built_before_fully_shard_is_named(tmp_path):
    outcome, moved = _run(tmp_path, "before")
    assert moved is False  # the consequence: the sharded model never trains
    [f] = [f for f in outcome.findings if f.code == "TP656"]
    assert "4 of the 4 parameters the Adam created at before.py:" in f.message and f.severity.value == "error"
    # not also TP404, whose message would blame the order of backward() and step()
    assert [f.code for f in outcome.findings if f.code == "TP404"] == []


def test_optimizer_built_after_fully_shard_is_silent(tmp_path):
    outcome, moved = _run(tmp_path, "after")
    assert moved is True and [f for f in outcome.findings if f.code == "TP656"] == []
