"""`torchpact run --profile`: phases of a step from real torch.profiler events, and findings TP911-TP913."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch

import torchpact
from torchpact.launch.single import run_script
from torchpact.watch import profiling as P
from torchpact.watch.watchers.step_profile import StepProfile

HEAVY_LOADER = """
import torch, torch.nn as nn
from torch.utils.data import DataLoader, Dataset

class Heavy(Dataset):
    def __len__(self): return 160
    def __getitem__(self, i):
        x = torch.randn(3, 32, 32)
        for _ in range(48):  # a heavy transform, run in the training process
            x = torch.nn.functional.avg_pool2d(x, 3, 1, 1)
        return x, i % 10

model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loss_fn = nn.CrossEntropyLoss()
for x, y in DataLoader(Heavy(), batch_size=16, num_workers=0):
    opt.zero_grad()
    loss_fn(model(x), y).backward()
    opt.step()
"""

SYNCS = """
import torch, torch.nn as nn

class Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(6))

    def forward(self, x):
        for layer in self.layers:
            h = layer(x)
            x = h if h.mean() > 0 else torch.relu(h)  # a Python branch on a tensor
        return x

model = Gated()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(9):
    opt.zero_grad()
    model(torch.randn(32, 16)).pow(2).mean().backward()
    opt.step()
    norms = [p.grad.norm().item() for p in model.parameters()]  # 12 reads per step
"""

PER_SAMPLE = """
import torch, torch.nn as nn

class PerSample(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8) * 0.1)

    def forward(self, x):
        outs = []
        for row in x:  # one sample at a time: many tiny operators
            outs.append((torch.tanh(row @ self.w) + row).sum())
        return torch.stack(outs)

model = PerSample()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(9):
    opt.zero_grad()
    model(torch.randn(64, 8)).pow(2).mean().backward()
    opt.step()
"""

CLEAN = """
import torch, torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()
data = TensorDataset(torch.randn(512, 64), torch.randint(0, 10, (512,)))
running = torch.zeros(())
for x, y in DataLoader(data, batch_size=64, shuffle=True):
    opt.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    running += loss.detach()
print(running.item())
"""


def _run(tmp_path: Path, source: str, name: str = "train.py", **options):
    script = tmp_path / name
    script.write_text(textwrap.dedent(source))
    profiler = StepProfile(warmup=options.get("warmup", 2), steps=options.get("steps", 3), trace_dir=str(tmp_path / "trace"))
    outcome = run_script(str(script), [], watchers=[profiler], live=False)
    assert outcome.exit_code == 0, outcome.error
    return outcome, outcome.data["profile"]


def _codes(outcome) -> dict[str, object]:
    return {f.code: f for f in outcome.findings}


# ---------------------------------------------------------------------------------- attribution
def test_phases_are_disjoint_and_the_most_specific_wins():
    events = [
        P.Event(P.STEP_MARKER + "0", 0, 0), P.Event(P.STEP_MARKER + "1", 100, 100),
        P.Event("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 20),
        P.Event(P.FORWARD_RANGE, 20, 50),
        P.Event(P.SCALAR_READ, 30, 35),                       # an .item() inside the forward
        P.Event("autograd::engine::evaluate_function: AddmmBackward0", 55, 80, thread=7),
        P.Event("c10d::allreduce_", 70, 85),                  # overlaps the end of backward
        P.Event("Optimizer.step#SGD.step", 85, 95),
    ]
    (lo, hi), = P.step_bounds(events)
    phases = P.attribute(events, lo, hi)
    us = {k: round(v * 1e6, 3) for k, v in phases.items()}
    assert us == {"dataloader": 20, "forward": 25, "sync": 5, "backward": 15, "communication": 15,
                  "optimizer": 10, "idle": 10}
    assert abs(sum(phases.values()) - 100e-6) < 1e-12


# ---------------------------------------------------------------------------------- real runs
def test_data_bound_loop_is_reported(tmp_path):
    outcome, profile = _run(tmp_path, HEAVY_LOADER)
    assert profile["data_loader"] == "single-process"
    median = profile["median"]
    assert median["dataloader"] > median["forward"] + median["backward"]
    finding = _codes(outcome)["TP911"]
    assert finding.severity.value == "warning" and "num_workers=0" in finding.message
    assert "num_workers=N" in finding.fix
    assert {"TP912", "TP913"}.isdisjoint(_codes(outcome))


def test_host_syncs_are_counted_with_their_sources(tmp_path):
    outcome, profile = _run(tmp_path, SYNCS)
    assert all(s["syncs"] == 18 for s in profile["steps"])
    assert profile["steps"][0]["sync_sources"] == {".item()": 12, "bool(tensor)": 6}
    finding = _codes(outcome)["TP912"]
    assert finding.severity.value == "info"  # CPU: a read is cheap here, a sync on a GPU
    assert ".item() ×12" in finding.message and "bool(tensor) ×6" in finding.message


def test_steps_of_tiny_operators_are_reported(tmp_path):
    outcome, profile = _run(tmp_path, PER_SAMPLE)
    assert P.median_of(profile["steps"], "ops") >= 300
    finding = _codes(outcome)["TP913"]
    assert "operators" in finding.message and "overhead" in finding.message


def test_a_clean_loop_is_silent_and_its_trace_is_exported(tmp_path):
    outcome, profile = _run(tmp_path, CLEAN)
    assert not outcome.findings, [f.message for f in outcome.findings]
    assert profile["status"] == "ok" and [s["step"] for s in profile["steps"]] == [2, 3, 4]
    for step in profile["steps"]:
        assert abs(sum(step["phases"].values()) - step["seconds"]) < 1e-6
        assert step["phases"]["forward"] > 0 and step["phases"]["backward"] > 0 and step["phases"]["optimizer"] > 0
    assert {o["name"] for o in profile["top_ops"]} & {"aten::addmm", "aten::mm"}
    trace = json.loads(Path(profile["trace"]).read_text())
    names = {ev.get("name") for ev in trace["traceEvents"]}
    assert P.FORWARD_RANGE in names and any(str(n).startswith(P.STEP_MARKER) for n in names)


def test_too_short_a_run_says_so(tmp_path):
    outcome, profile = _run(tmp_path, SYNCS.replace("range(9)", "range(2)"), warmup=3)
    assert profile["status"] == "too short" and "2 optimizer steps" in profile["reason"]


def test_profiling_does_not_change_training():
    def train():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        for _ in range(8):
            opt.zero_grad()
            model(torch.randn(16, 8)).pow(2).mean().backward()
            opt.step()
        return [p.detach().clone() for p in model.parameters()]

    plain = train()
    with torchpact.watch([StepProfile(warmup=2, steps=3, trace_dir=None)]) as session:
        watched = train()
    assert session.watchers[0].result["status"] == "ok"
    assert all(torch.equal(a, b) for a, b in zip(plain, watched))


def test_profiled_steps_skip_the_sampled_checks():
    with torchpact.watch([StepProfile(warmup=2, steps=3, trace_dir=None)]) as session:
        sampled = [session.sampler(s) for s in range(8)]
    assert sampled == [True, True, False, False, False, True, True, True]


@pytest.mark.parametrize("args", [["--profile", "--nproc", "2"], ["--profile", "--profile-steps", "0"]])
def test_profile_usage_errors(args, tmp_path, capsys):
    from torchpact.cli import main

    script = tmp_path / "s.py"
    script.write_text("pass\n")
    assert main(["run", *args, str(script)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
