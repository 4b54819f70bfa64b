"""Runtime TP550: dataset-owned generators that start identical in every DataLoader worker."""

from __future__ import annotations

import json

import numpy as np

from tests.watch.util import run_source

SCRIPT = """
import sys
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

class Noisy(Dataset):
    def __init__(self):
        self.rng = np.random.default_rng(0)  # owned by the dataset: copied into every worker

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.tensor(self.rng.normal(), dtype=torch.float32)

def reseed(worker_id):
    info = torch.utils.data.get_worker_info()
    info.dataset.rng = np.random.default_rng(info.seed)

fix = sys.argv[1] == "fixed"
loader = DataLoader(Noisy(), batch_size=4, num_workers=2, worker_init_fn=reseed if fix else None)
model = torch.nn.Linear(1, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
draws = []
for epoch in range(2):
    for x in loader:
        draws.append(x.tolist())
        opt.zero_grad()
        model(x[:, None]).pow(2).mean().backward()
        opt.step()
with open(sys.argv[2], "w") as f:
    json.dump(draws, f)
""".replace("import sys", "import json, sys")


def _run(tmp_path, mode):
    out = tmp_path / f"{mode}.json"
    outcome = run_source(tmp_path, SCRIPT, ["worker_rng"], args=[mode, str(out)], name=f"{mode}.py")
    return outcome, json.loads(out.read_text())


def test_every_worker_draws_the_same_noise_and_the_generator_is_named(tmp_path):
    outcome, draws = _run(tmp_path, "buggy")
    assert draws[0] == draws[1]  # the consequence: worker 0's batch repeats in worker 1
    [f] = [f for f in outcome.findings if f.code == "TP550"]
    assert "`dataset.rng` of Noisy" in f.message and "all 2 DataLoader workers" in f.message
    assert f.path.endswith("buggy.py") and f.line is not None


def test_seeded_per_worker_is_silent_and_batches_are_unchanged(tmp_path):
    outcome, draws = _run(tmp_path, "fixed")
    assert [f.code for f in outcome.findings if f.code == "TP550"] == []
    assert draws[0] != draws[1] and not np.isnan(draws).any()
