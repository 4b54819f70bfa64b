"""`torchpact run` itself: the script behaves as under plain python, the watchers only observe, and
every way a script can end still gives a report with the script's exit code."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from tests.watch.util import run_source
from torchpact.cli import main

TRAIN_WITH_DROPOUT = """
import sys
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(inplace=True), nn.Dropout(0.3), nn.BatchNorm1d(64),
                      nn.Linear(64, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
sched = torch.optim.lr_scheduler.StepLR(opt, 5)
for step in range(40):
    x = torch.randn(32, 16)
    y = x.sum(1, keepdim=True)
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    if step % 10 == 0:
        model.eval()
        with torch.no_grad():
            model(torch.randn(8, 16))
        model.train()
torch.save(model.state_dict(), sys.argv[1])
"""


def _global_hook_counts():
    from torch.nn.modules import module as m
    from torch.optim import optimizer as o

    return (len(m._global_forward_pre_hooks), len(m._global_forward_hooks), len(m._global_backward_hooks),
            len(o._global_optimizer_pre_hooks), len(o._global_optimizer_post_hooks))


def test_training_is_bit_identical_under_watchers(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN_WITH_DROPOUT)
    plain = tmp_path / "plain.pt"
    subprocess.run([sys.executable, str(script), str(plain)], check=True, timeout=120)
    watched = tmp_path / "watched.pt"
    out = subprocess.run([sys.executable, "-m", "torchpact", "run", "--quiet", "--sample-every", "1",
                          "--format", "json", str(script), str(watched)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["summary"]["steps"] == 40
    a, b = torch.load(plain), torch.load(watched)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_hooks_are_removed_after_a_crash(tmp_path):
    before = _global_hook_counts()
    outcome = run_source(tmp_path, """
        import torch
        w = torch.zeros(3, requires_grad=True)
        w -= 1
    """)
    assert _global_hook_counts() == before
    assert outcome.exit_code == 1
    [crash] = [f for f in outcome.findings if f.code == "TP003"]
    assert crash.line == 4 and crash.path.endswith("train.py")
    assert "in-place update" in crash.message and "TP202" in crash.fix


def test_script_sees_argv_file_cwd_relative_paths_and_main(tmp_path, monkeypatch):
    (tmp_path / "data.txt").write_text("42")
    monkeypatch.chdir(tmp_path)
    outcome = run_source(tmp_path, """
        import os, sys
        assert __name__ == "__main__"
        assert os.path.basename(__file__) == "train.py"
        assert sys.argv[1:] == ["--lr", "3e-4"], sys.argv
        assert sys.path[0] == os.path.dirname(os.path.abspath(__file__))
        assert open("data.txt").read() == "42"
        sys.exit(3)
    """, args=["--lr", "3e-4"])
    assert outcome.exit_code == 3 and outcome.error is None


def test_sys_exit_with_message_and_zero(tmp_path):
    assert run_source(tmp_path, "import sys\nsys.exit(0)\n").exit_code == 0
    assert run_source(tmp_path, "import sys\nsys.exit('bad config')\n").exit_code == 1


def test_dataloader_workers_work(tmp_path):
    outcome = run_source(tmp_path, """
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        def main():
            ds = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
            model = torch.nn.Linear(4, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in DataLoader(ds, batch_size=16, num_workers=2):
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()

        if __name__ == "__main__":
            main()
    """)
    assert outcome.exit_code == 0 and outcome.steps == 4, outcome.findings


def test_ctrl_c_gives_a_report(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent("""
        import time, torch
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(10**9):
            opt.zero_grad(); model(torch.randn(2, 4)).sum().backward(); opt.step()
            if i == 3:
                print("ready", flush=True)
            time.sleep(0.01)
    """))
    report = tmp_path / "report.json"
    proc = subprocess.Popen([sys.executable, "-m", "torchpact", "run", "--quiet", "--format", "json",
                             "--output", str(report), str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    doc = json.loads(report.read_text())
    assert doc["summary"]["steps"] >= 4 and "interrupted" in doc["summary"]["error"]


def test_run_usage_errors(tmp_path, capsys):
    assert main(["run", str(tmp_path / "missing.py")]) == 2
    assert "no such script" in capsys.readouterr().err
    assert main(["run", str(tmp_path)]) == 2
    assert main(["run", "--watchers", "nope", str(tmp_path / "x.py")]) == 2


def test_python_api_watch_collects_findings():
    import torchpact

    with torchpact.watch() as w:
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        opt.zero_grad()
        model(torch.randn(3, 2)).sum().backward()
        opt.step()
    assert w.closed and w.step == 1 and isinstance(w.findings, list)


def test_compiled_model_trains_under_watchers(tmp_path):
    outcome = run_source(tmp_path, """
        import torch
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        fast = torch.compile(model, backend="eager")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            fast(torch.randn(16, 4)).pow(2).mean().backward()
            opt.step()
    """)
    assert outcome.exit_code == 0 and outcome.steps == 3, outcome.error
    assert not [f for f in outcome.findings if f.code in ("TP002", "TP003")], outcome.findings


def test_steps_keep_counting_when_the_optimizer_is_rebuilt(tmp_path):
    outcome = run_source(tmp_path, """
        import torch
        model = torch.nn.Linear(4, 1)
        for epoch in range(3):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)  # rebuilt every epoch
            for _ in range(2):
                opt.zero_grad()
                model(torch.randn(8, 4)).sum().backward()
                opt.step()
    """, watchers=["progress"])
    assert outcome.steps == 6


def test_loss_series_of_a_functional_loss(tmp_path):
    outcome = run_source(tmp_path, """
        import torch
        import torch.nn.functional as F

        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        x, y = torch.randn(32, 4), torch.randint(0, 3, (32,))
        expected = []
        for _ in range(5):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)   # no nn.*Loss module for the hooks to see
            loss.backward()
            opt.step()
            expected.append(loss.item())
        torch.save(expected, __file__ + ".expected.pt")
    """, watchers=["progress"])
    assert outcome.exit_code == 0, outcome.error
    import torch

    expected = torch.load(tmp_path / "train.py.expected.pt")
    assert outcome.data["progress"]["loss"] == list(enumerate(expected))
