"""profiling: scalar reads made by the DataLoader (on CPU tensors) are data loading, not host syncs."""

from __future__ import annotations

import textwrap

from torchpact.launch.single import run_script
from torchpact.watch.watchers.step_profile import StepProfile

LOADER_READS = """
import torch, torch.nn as nn
from torch.utils.data import DataLoader, Dataset

class Labelled(Dataset):
    def __init__(self):
        self.x, self.y = torch.randn(256, 16), torch.randint(0, 4, (256,))
    def __len__(self): return 256
    def __getitem__(self, i):
        return self.x[i], int(self.y[i].item())  # CPU tensors: a read of host memory, no device involved

model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(Labelled(), batch_size=16, num_workers=0):
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
"""


def test_reads_inside_the_dataloader_are_not_counted_as_syncs(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(LOADER_READS))
    profiler = StepProfile(warmup=2, steps=3, trace_dir=None)
    outcome = run_script(str(script), [], watchers=[profiler], live=False)
    assert outcome.exit_code == 0, outcome.error
    steps = outcome.data["profile"]["steps"]
    # 16 reads per batch, all in the loader
    assert steps and all(s["syncs"] == 0 and s["scalar_reads"] == 0 for s in steps)
    assert all(s["phases"]["sync"] == 0 for s in steps)
    assert "TP912" not in {f.code for f in outcome.findings}
