"""`torchpact run --profile`: phases of a step from real torch.profiler events, and findings TP911-TP913."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import torchpact
from torchpact.findings import Severity
from torchpact.launch.single import run_script
from torchpact.watch import profiling as P
from torchpact.watch.watchers.step_profile import OPS_PER_STEP, SYNCS_PER_STEP, StepProfile, judge

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
    profiler = StepProfile(warmup=options.get("warmup", 2), steps=options.get("steps", 3),
                           trace_dir=str(tmp_path / "trace"))
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


# ---------------------------------------------------------------------------------- the decision
# The findings are a pure function of the recorded numbers (`judge`), tested here on synthetic steps:
# real timings depend on the machine's load, so the real runs below assert counts and consistency only.
def _step(seconds=0.010, *, dataloader=0.0, sync=0.0, syncs=0, sources=None, ops=50, op_median_us=40.0,
          op_seconds=None, compute_seconds=None, **device):
    compute = seconds - dataloader - sync if compute_seconds is None else compute_seconds
    phases = dict.fromkeys(P.PHASES, 0.0) | {"dataloader": dataloader, "sync": sync, "forward": compute}
    return {"seconds": seconds, "phases": phases, "syncs": syncs, "scalar_reads": syncs,
            "sync_sources": sources or {}, "ops": ops, "op_median_us": op_median_us,
            "op_seconds": compute * 0.8 if op_seconds is None else op_seconds, "compute_seconds": compute, **device}


def _verdicts(steps, device=False, data_loader=None):
    result = {"steps": steps, "median": P._median_phases(steps), "data_loader": data_loader}
    return {v.check.code: v for v in judge(result, device=device)}


def test_a_step_waiting_on_the_loader_is_data_bound():
    found = _verdicts([_step(0.010, dataloader=0.004)] * 3, data_loader="single-process")
    assert set(found) == {"TP911"}
    assert "40% of each step" in found["TP911"].message and "num_workers=0" in found["TP911"].message
    assert "num_workers=N" in found["TP911"].fix
    workers = _verdicts([_step(0.010, dataloader=0.004)] * 3, data_loader="worker processes")["TP911"]
    assert "worker processes do not produce" in workers.message


@pytest.mark.parametrize("step", [_step(0.010, dataloader=0.0029),      # under 30% of the step
                                  _step(0.004, dataloader=0.0019)],     # half the step, but under 2 ms
                         ids=["small-share", "short-wait"])
def test_a_short_or_small_loader_wait_is_not_data_bound(step):
    assert _verdicts([step] * 3) == {}


def test_host_syncs_per_step():
    sources = {".item()": 12, "bool(tensor)": 6}
    cpu = _verdicts([_step(syncs=18, sources=sources)] * 3)["TP912"]
    assert cpu.severity == Severity.INFO and ".item() ×12" in cpu.message and "bool(tensor) ×6" in cpu.message
    gpu = _verdicts([_step(syncs=18, sync=0.005, sources=sources, kernels=10, kernel_median_us=50.0,
                           device_busy_seconds=0.005)] * 3, device=True)["TP912"]
    assert gpu.severity == Severity.WARNING and "50% of the step spent waiting" in gpu.message
    assert _verdicts([_step(syncs=9)] * 3) == {}


def test_steps_of_tiny_operators_are_overhead_bound():
    found = _verdicts([_step(0.030, ops=716, op_median_us=2.0, op_seconds=0.003)] * 3)["TP913"]
    assert "716 operators with a median of 2.0 µs" in found.message and "overhead" in found.message
    assert found.extra == {"ops_per_step": 716.0, "op_median_us": 2.0, "op_share": 0.1}


@pytest.mark.parametrize("step", [_step(0.030, ops=299, op_median_us=2.0, op_seconds=0.003),   # few operators
                                  _step(0.030, ops=716, op_median_us=20.0, op_seconds=0.003),  # not tiny
                                  _step(0.030, ops=716, op_median_us=2.0, op_seconds=0.015)],  # ops fill half
                         ids=["few", "not-tiny", "ops-dominate"])
def test_operators_that_are_few_large_or_dominant_are_not_overhead(step):
    assert _verdicts([step] * 3) == {}


def test_tiny_gpu_kernels_with_an_idle_device():
    tiny = {"kernels": 400, "kernel_median_us": 4.0, "device_busy_seconds": 0.002}
    found = _verdicts([_step(0.010, **tiny)] * 3, device=True)["TP913"]
    assert found.severity == Severity.WARNING and "400 GPU kernels" in found.message and "20%" in found.message
    busy = tiny | {"device_busy_seconds": 0.008}
    assert _verdicts([_step(0.010, **busy)] * 3, device=True) == {}


def test_no_step_no_verdict():
    assert judge({"steps": [], "median": {}}, device=False) == []


# ---------------------------------------------------------------------------------- real runs
def _reported_as_judged(outcome, profile):
    """What the run reported is what `judge` says of the numbers it recorded."""
    judged = {v.check.code for v in judge(profile, device=profile["device"])}
    assert {f.code for f in outcome.findings} == judged


def test_data_bound_loop_is_profiled(tmp_path):
    outcome, profile = _run(tmp_path, HEAVY_LOADER)
    assert profile["data_loader"] == "single-process"
    assert all(s["phases"]["dataloader"] > 0 for s in profile["steps"])
    assert all(s["ops"] < OPS_PER_STEP for s in profile["steps"])  # the loader's operators are not the step's
    _reported_as_judged(outcome, profile)


def test_host_syncs_are_counted_with_their_sources(tmp_path):
    outcome, profile = _run(tmp_path, SYNCS)
    assert all(s["syncs"] == 18 for s in profile["steps"])
    assert profile["steps"][0]["sync_sources"] == {".item()": 12, "bool(tensor)": 6}
    finding = _codes(outcome)["TP912"]  # a count, whatever the machine's load
    assert finding.severity.value == "info"  # CPU: a read is cheap here, a sync on a GPU
    assert ".item() ×12" in finding.message and "bool(tensor) ×6" in finding.message
    _reported_as_judged(outcome, profile)


def test_steps_of_tiny_operators_are_counted(tmp_path):
    outcome, profile = _run(tmp_path, PER_SAMPLE)
    assert all(s["ops"] >= 64 * 5 for s in profile["steps"])  # five operators per sample, 64 samples
    assert all(0 < s["op_median_us"] and 0 < s["op_seconds"] <= s["compute_seconds"] for s in profile["steps"])
    _reported_as_judged(outcome, profile)


def test_a_clean_loop_is_silent_and_its_trace_is_exported(tmp_path):
    outcome, profile = _run(tmp_path, CLEAN)
    assert {"TP912", "TP913"}.isdisjoint(_codes(outcome))  # counts: ~1 scalar read (AdamW), ~100 operators a step
    assert all(s["syncs"] < SYNCS_PER_STEP and s["ops"] < OPS_PER_STEP for s in profile["steps"])
    _reported_as_judged(outcome, profile)
    assert profile["status"] == "ok" and [s["step"] for s in profile["steps"]] == [2, 3, 4]
    for step in profile["steps"]:
        assert abs(sum(step["phases"].values()) - step["seconds"]) < 1e-6
        assert step["phases"]["forward"] > 0 and step["phases"]["backward"] > 0 and step["phases"]["optimizer"] > 0
    assert {o["name"] for o in profile["top_ops"]} & {"aten::addmm", "aten::mm"}
    trace = json.loads(Path(profile["trace"]).read_text())
    names = {ev.get("name") for ev in trace["traceEvents"]}
    assert P.FORWARD_RANGE in names and any(str(n).startswith(P.STEP_MARKER) for n in names)


def test_too_short_a_run_says_so(tmp_path):
    _, profile = _run(tmp_path, SYNCS.replace("range(9)", "range(2)"), warmup=3)
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
    assert all(torch.equal(a, b) for a, b in zip(plain, watched, strict=True))


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


# ---------------------------------------------------------------------------------- on the screen
def test_the_terminal_report_says_where_step_time_goes():
    from torchpact.launch.footer import profile_lines

    steps = [_step(0.010, dataloader=0.004)] * 3
    profile = {"status": "ok", "steps": steps, "median": P._median_phases(steps), "device": False,
               "top_ops": [{"name": "aten::addmm", "calls": 30, "self_ms": 1.5, "total_ms": 2.0}],
               "trace": "torchpact-profile/h_1.pt.trace.json"}
    first, ops, trace = profile_lines(profile)
    assert first == ("profile: a step takes 10.0 ms (median of 3 profiled steps): forward 60%, data loading 40%")
    assert "aten::addmm 1.50 ms ×30" in ops and "torchpact-profile/h_1.pt.trace.json" in trace
    assert profile_lines({"status": "too short", "reason": "2 steps"}) == ["profile: too short (2 steps)"]


def test_profile_run_prints_the_breakdown_and_no_profiler_noise(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SYNCS))
    out = subprocess.run([sys.executable, "-m", "torchpact", "run", "--profile", "--profile-warmup", "2",
                          "--profile-steps", "2", "--profile-dir", str(tmp_path / "trace"), str(script)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "profile: a step takes" in out.stdout and "top operators" in out.stdout, out.stdout
    assert "USDT" not in out.stderr + out.stdout and "profiler_start" not in out.stderr, out.stderr
