"""`torchpact run` itself: the script behaves as under plain python, the watchers only observe, and
every way a script can end still gives a report with the script's exit code."""

from __future__ import annotations

import gc
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
import torch

from tests.watch.util import run_source
from torchpact.cli import main
from torchpact.launch.single import run_script
from torchpact.watch import Sampler

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


def _plain_and_watched(tmp_path, source: str) -> tuple[dict, dict, dict]:
    """The state dict ``source`` saves run plainly and under every watcher, and the torchpact report."""
    script = tmp_path / "train.py"
    script.write_text(source)
    plain = tmp_path / "plain.pt"
    subprocess.run([sys.executable, str(script), str(plain)], check=True, timeout=120)
    watched, report = tmp_path / "watched.pt", tmp_path / "report.json"
    out = subprocess.run([sys.executable, "-m", "torchpact", "run", "--quiet", "--sample-every", "1",
                          "--format", "json", "--output", str(report), str(script), str(watched)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return torch.load(plain), torch.load(watched), json.loads(report.read_text())


def test_training_is_bit_identical_under_watchers(tmp_path):
    a, b, report = _plain_and_watched(tmp_path, TRAIN_WITH_DROPOUT)
    assert report["summary"]["steps"] == 40
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


TRAIN_THROUGH_WRAPPED_FUNCTIONS = """
import sys
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

class Noisy(Dataset):
    def __init__(self):
        self.rng = np.random.default_rng(0)
        self.gen = torch.Generator().manual_seed(1)

    def __len__(self):
        return 64

    def __getitem__(self, i):
        x = torch.randn(8, generator=self.gen) + float(self.rng.normal())
        return x, int(i % 3)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.head = nn.Linear(8, 3)
        self.apply(self._init)

    def _init(self, m):
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            m.bias.data.zero_()

    def train(self, mode=True):
        super().train(mode)
        return self

    def forward(self, x):
        q, k, v = self.qkv(x[:, None, :]).chunk(3, -1)
        h = F.scaled_dot_product_attention(q, k, v, dropout_p=0.2 if self.training else 0.0)[:, 0]
        return self.head(F.dropout(h, 0.1, training=self.training))

def seed_worker(worker_id):
    info = torch.utils.data.get_worker_info()
    info.dataset.rng = np.random.default_rng(info.seed)
    info.dataset.gen = torch.Generator().manual_seed(info.seed)

torch.manual_seed(0)
model = Net()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
loader = DataLoader(Noisy(), batch_size=8, num_workers=2, worker_init_fn=seed_worker,
                    generator=torch.Generator().manual_seed(0), shuffle=True)
model.train()
for epoch in range(2):
    for x, y in loader:
        opt.zero_grad()
        scaler.scale(F.cross_entropy(model(x), y)).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
    model.eval()
    with torch.no_grad():
        model(torch.randn(4, 8))
    model.train()
torch.save(model.state_dict(), sys.argv[1])
"""


def test_training_through_wrapped_functions_is_bit_identical(tmp_path):
    """nn.init, Module.apply/train, F.dropout/SDPA/cross_entropy, clipping, unscale_ and DataLoader workers."""
    a, b, report = _plain_and_watched(tmp_path, TRAIN_THROUGH_WRAPPED_FUNCTIONS)
    assert [f for f in report["findings"] if f["severity"] != "info"] == []
    for k in a:
        assert torch.equal(a[k], b[k]), k
    import torch.nn.functional as F
    from torch.nn import init
    assert F.dropout.__module__ == "torch.nn.functional" and init.normal_.__module__ == "torch.nn.init"


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


# ---------------------------------------------------------------------------------- report paths
@pytest.mark.parametrize("where", ["missing-folder", "a-folder", "html-missing-folder"])
def test_an_unwritable_report_path_fails_before_the_script_runs(tmp_path, capsys, where):
    script = tmp_path / "train.py"
    script.write_text("open(__file__ + '.ran', 'w').close()\n")
    missing = str(tmp_path / "nonexistent" / "r.json")
    args = {"missing-folder": ["--html", str(tmp_path / "nonexistent" / "r.html"), "--output", missing],
            "a-folder": ["--output", str(tmp_path)],
            "html-missing-folder": ["--html", str(tmp_path / "nonexistent" / "r.html")]}[where]
    assert main(["run", "-q", *args, str(script)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("torchpact: error: cannot write"), err
    assert not (tmp_path / "train.py.ran").exists()  # the script never started


def test_a_report_that_cannot_be_written_at_the_end_goes_to_a_temporary_file(tmp_path, capsys):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import shutil, sys, torch
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        shutil.rmtree({str(out_dir)!r})  # the report's folder is gone by the end of the run
        sys.exit(3)
    """))
    code = main(["run", "-q", "--format", "json", "--output", str(out_dir / "r.json"),
                 "--html", str(out_dir / "r.html"), str(script)])
    assert code == 3  # the script's exit code, not a usage error
    captured = capsys.readouterr()
    moved = dict(re.findall(r"cannot write (\S+) \(.*\); the (?:HTML )?report is in (\S+)", captured.err))
    assert set(moved) == {str(out_dir / "r.json"), str(out_dir / "r.html")}, captured.err
    try:
        doc = json.loads(Path(moved[str(out_dir / "r.json")]).read_text())
        assert doc["summary"]["exit_code"] == 3 and doc["summary"]["steps"] == 1
        assert "<html" in Path(moved[str(out_dir / "r.html")]).read_text().lower()
    finally:
        for path in moved.values():
            os.unlink(path)
    assert "exit code 3" in captured.out  # the findings, as text, on the screen instead


# ---------------------------------------------------------------------------------- SIGTERM
def test_sigterm_gives_a_report_like_ctrl_c(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent("""
        import torch
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(10**9):
            opt.zero_grad(); model(torch.randn(2, 4)).sum().backward(); opt.step()
            if i == 3:
                print("ready", flush=True)
    """))
    report = tmp_path / "report.json"
    proc = subprocess.Popen([sys.executable, "-m", "torchpact", "run", "--quiet", "--format", "json",
                             "--output", str(report), str(script)], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        proc.stdout.close()
    doc = json.loads(report.read_text())
    assert doc["summary"]["steps"] >= 4 and "SIGTERM" in doc["summary"]["error"]


def test_sigterm_removes_the_hooks_and_restores_the_handler(tmp_path):
    before, handler = _global_hook_counts(), signal.getsignal(signal.SIGTERM)
    outcome = run_source(tmp_path, """
        import os, signal, torch
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("not reached")
    """)
    assert outcome.exit_code == 143 and outcome.steps == 1 and outcome.error == "terminated (SIGTERM)"
    assert _global_hook_counts() == before and signal.getsignal(signal.SIGTERM) == handler


# ---------------------------------------------------------------------------------- the user's traceback
LOSS_ERROR = """
import torch
import torch.nn.functional as F


def loss_of(logits, target):
    return F.cross_entropy(logits, target)  # through the loss_inputs and chance_loss watchers' wrappers


loss_of(torch.randn(4, 3), torch.tensor([0, 1, 2, 5]))
"""


@pytest.mark.parametrize("source", ["import torch\nx = 1\ndef f(:\n    pass\n", LOSS_ERROR],
                         ids=["syntax-error", "error-inside-a-loss"])
def test_the_traceback_is_the_one_python_prints(tmp_path, capsys, source):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source))
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    outcome = run_script(str(script), [], live=False)
    assert outcome.exit_code == plain.returncode == 1
    assert capsys.readouterr().err == plain.stderr  # no torchpact or runpy frames
    [crash] = [f for f in outcome.findings if f.code == "TP003"]
    # the innermost line of the script
    assert crash.path == str(script) and crash.line == (3 if "def f(:" in source else 7)


def test_warnings_point_at_the_user_line_not_at_torchpact(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch\nimport torch.nn.functional as F\n\nF.softmax(torch.randn(4, 3))\n")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        run_script(str(script), [], live=False)
    [softmax] = [w for w in seen if "Implicit dimension" in str(w.message)]
    assert (softmax.filename, softmax.lineno) == (str(script), 4)


# ---------------------------------------------------------------------------------- references
RELEASED = """
import gc, sys, weakref
import torch
import torch.nn as nn
import torch.nn.functional as F


def mark(name):
    with open(sys.argv[1], "a") as fh:
        fh.write(name + "\\n")


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(inplace=True), nn.BatchNorm2d(4), nn.Flatten(),
                          nn.Dropout(0.1), nn.Linear(144, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(4):
        opt.zero_grad()
        out = model(torch.randn(8, 1, 8, 8))
        loss = F.cross_entropy(out, torch.randint(0, 3, (8,))) + nn.MSELoss()(out, torch.zeros_like(out))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    for obj, name in ((model, "model"), (out, "output"), (loss, "loss"), (opt, "optimizer")):
        weakref.finalize(obj, mark, name).atexit = False  # out and loss: graph-attached tensors


main()
if sys.argv[2:] == ["collect"]:
    gc.collect()  # torch leaves reference cycles even under plain python: released at the next collection
    mark("collected")
"""


def test_the_script_s_models_and_graphs_are_released_once_the_run_is_over(tmp_path):
    # A watcher that kept the script's modules or graph-attached tensors after the run would keep, under DDP,
    # the Reducer and its process group alive into the interpreter's teardown, where ~ProcessGroupGloo can
    # block joining gloo's threads: a rank that never exits. Plain python releases them.
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(RELEASED))
    plain_marks, marks = tmp_path / "plain.txt", tmp_path / "watched.txt"
    plain = subprocess.run([sys.executable, str(script), str(plain_marks), "collect"], capture_output=True,
                           text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    assert sorted(plain_marks.read_text().split()) == ["collected", "loss", "model", "optimizer", "output"]
    outcome = run_script(str(script), [str(marks)], live=False, sampler=Sampler(first=100, every=1))
    assert outcome.exit_code == 0, outcome.error
    gc.collect()
    assert sorted(marks.read_text().split()) == ["loss", "model", "optimizer", "output"]


WARNS_AT_SEVERAL_DEPTHS = """
import warnings
import torch
import torch.nn as nn
import torch.nn.functional as F

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.crit = nn.MSELoss()

    def forward(self, x):
        warnings.warn("in forward", stacklevel=2)      # lands in torch's Module._call_impl
        warnings.warn("in the caller", stacklevel=4)   # lands on the script's line that called the model
        return self.fc(x)

def main():
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(60):  # sampled steps (global module hooks) and unsampled ones (none) alternate
        x, y = torch.randn(8, 4), torch.randn(3)
        out = model(x)
        loss = F.mse_loss(out, y) + model.crit(out, y)   # torch's broadcast warning, from two places
        loss = loss + F.mse_loss(out[:, :1], y)          # and from a third line
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.tensor(torch.ones(2))                          # a warning from torch's C++ code

main()
"""


def _warning_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if re.match(r"^\S+:\d+: \w*Warning: ", line)]


def test_torch_warnings_are_shown_where_and_as_often_as_without_torchpact(tmp_path):
    """Each warning once per location, at the location a plain run gives: before, a warning raised with a
    stacklevel landed on torchpact's frames or on torch's slow-path frames, was shown twice (sampled and
    unsampled steps take different paths) and at other lines, and torch's own warnings raised through a
    torchpact wrapper from several lines were shown once only."""
    script = tmp_path / "train.py"
    script.write_text(WARNS_AT_SEVERAL_DEPTHS)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    watched = subprocess.run([sys.executable, "-m", "torchpact", "run", "--quiet", str(script)],
                             capture_output=True, text=True, timeout=300)
    expected = _warning_lines(plain.stderr)
    assert len(expected) == 6 and sum("train.py:" in line for line in expected) == 4
    assert _warning_lines(watched.stderr) == expected
