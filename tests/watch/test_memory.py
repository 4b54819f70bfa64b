"""The memory watcher: graphs kept alive across steps (TP101/TP102), growing memory (TP151), CUDA caches (TP152)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn

from tests.watch.util import codes, run_source, watched

WATCHERS = ["memory"]

MLP = """
import torch, torch.nn as nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = nn.CrossEntropyLoss()
"""


def _one(outcome, code):
    found = [f for f in outcome.findings if f.code == code]
    assert len(found) == 1, outcome.findings
    return found[0]


# ------------------------------------------------------------------------------------ buggy loops
def test_running_total_of_losses_is_tp101(tmp_path):
    out = run_source(tmp_path, MLP + """
total = 0
for step in range(12):
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    loss = criterion(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    total += loss
print(total.item() / 12)
""", WATCHERS)
    assert out.exit_code == 0
    f = _one(out, "TP101")
    assert f.severity.value == "error"
    assert f.subject == "total" and f.path.endswith("train.py") and f.line == 15
    assert "loss.detach()" in f.fix
    assert codes(out.findings) == ["TP101"]


def test_list_of_losses_is_tp102(tmp_path):
    out = run_source(tmp_path, MLP + """
losses = []
for step in range(12):
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    loss = criterion(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss)
""", WATCHERS)
    f = _one(out, "TP102")
    assert f.subject == "losses" and f.line == 15 and f.severity.value == "error"
    assert "list `losses`" in f.message
    assert codes(out.findings) == ["TP102"]


def test_model_outputs_kept_in_a_dict_inside_a_function_are_tp102(tmp_path):
    out = run_source(tmp_path, MLP + """
def train():
    outputs = {}
    for step in range(12):
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        logits = model(x)
        outputs[step] = logits
        loss = criterion(logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return len(outputs)
train()
""", WATCHERS)
    f = _one(out, "TP102")
    assert f.subject == "outputs" and f.line == 13
    assert "dict `outputs`" in f.message


def test_history_attribute_of_a_trainer_is_tp102(tmp_path):
    out = run_source(tmp_path, """
import torch, torch.nn as nn
torch.manual_seed(0)

class Trainer:
    def __init__(self):
        self.model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.history = []

    def step(self, x, y):
        loss = nn.functional.cross_entropy(self.model(x), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.history.append({"loss": loss, "n": len(x)})

Trainer_ = Trainer()
for _ in range(12):
    Trainer_.step(torch.randn(4, 8), torch.randint(0, 2, (4,)))
""", WATCHERS)
    f = _one(out, "TP102")
    assert f.subject == "self.history" and f.line == 16


def test_graphs_held_before_backward_are_found_without_a_crash_when_the_script_fails(tmp_path):
    # outputs stored before their loss is back-propagated keep every saved activation too
    out = run_source(tmp_path, MLP + """
kept = []
for step in range(10):
    out = model(torch.randn(8, 16))
    kept.append(out)
    loss = out.pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
raise SystemExit(3)
""", WATCHERS)
    assert out.exit_code == 3
    assert _one(out, "TP102").subject == "kept"


def test_growing_history_of_detached_predictions_is_tp151(tmp_path):
    # 2 MiB of predictions kept per step: no graph, but host memory grows without bound. Resident memory
    # is the measure, so the script runs in a fresh process (in a test worker, memory that earlier tests
    # freed is reused first) and long enough that the 64 MiB threshold is passed with sampled steps to
    # spare (the growth is confirmed on a sampled step ten steps after it is first seen).
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import torch, torch.nn as nn
        torch.manual_seed(0)
        model = nn.Linear(8, 2048)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        all_preds = []
        for step in range(90):
            x = torch.randn(256, 8)
            out = model(x)
            loss = out.pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            all_preds.append(out.detach())
    """))
    report = tmp_path / "report.json"
    subprocess.run([sys.executable, "-m", "torchpact", "run", "--quiet", "--format", "json", "--output", str(report),
                    "--watchers", ",".join(WATCHERS), str(script)], cwd=tmp_path, timeout=600, check=True)
    findings = json.loads(report.read_text())["findings"]
    assert sorted(f["code"] for f in findings) == ["TP151"], findings
    [f] = findings
    assert f["severity"] == "warning"
    assert f["subject"] == "all_preds" and f["line"] == 14
    assert "2.0 MiB of tensors per step" in f["message"]
    assert f["extra"]["bytes_per_step"] > 1 << 20


# ------------------------------------------------------------------------------------ clean loops
def test_logged_numbers_detached_totals_and_bounded_windows_are_silent(tmp_path):
    out = run_source(tmp_path, MLP + """
import collections
losses, total, recent = [], 0.0, collections.deque(maxlen=3)
running = torch.zeros(())
best = None
for step in range(30):
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    out = model(x)
    loss = criterion(out, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    total += loss.item()
    running += loss.detach()
    recent.append(loss)            # graph-attached, but only the last 3 steps
    if best is None or loss.item() < best.item():
        best = loss                # one step's graph, replaced now and then
    with torch.no_grad():
        val = criterion(model(torch.randn(8, 16)), y)
""", WATCHERS)
    assert out.exit_code == 0
    assert out.findings == []


def test_cnn_with_accumulation_clipping_and_scheduler_is_silent():
    def train():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5)
        for _step in range(25):
            opt.zero_grad()
            for _micro in range(3):
                loss = nn.functional.cross_entropy(model(torch.randn(4, 3, 8, 8)), torch.randint(0, 10, (4,)))
                (loss / 3).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()

    assert watched(train, WATCHERS) == []


def test_transformer_with_frozen_embedding_and_two_optimizers_is_silent():
    def train():
        torch.manual_seed(0)
        emb = nn.Embedding(50, 32)
        emb.weight.requires_grad_(False)
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        head = nn.Linear(32, 50)
        opt_body = torch.optim.AdamW(layer.parameters(), lr=1e-3)
        opt_head = torch.optim.SGD(head.parameters(), lr=1e-2)
        history = []
        for _step in range(25):
            tokens = torch.randint(0, 50, (4, 12))
            logits = head(layer(emb(tokens)))
            loss = nn.functional.cross_entropy(logits.reshape(-1, 50), tokens.reshape(-1))
            opt_body.zero_grad()
            opt_head.zero_grad()
            loss.backward()
            opt_body.step()
            opt_head.step()
            history.append(logits.detach().argmax(-1))  # small and graph-free

    assert watched(train, WATCHERS) == []


def test_gan_with_detached_fakes_is_silent():
    def train():
        torch.manual_seed(0)
        gen = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
        disc = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
        opt_g = torch.optim.Adam(gen.parameters(), lr=1e-3)
        opt_d = torch.optim.Adam(disc.parameters(), lr=1e-3)
        bce = nn.BCEWithLogitsLoss()
        for _step in range(25):
            fake = gen(torch.randn(8, 4))
            d_loss = bce(disc(torch.randn(8, 8)), torch.ones(8, 1)) + bce(disc(fake.detach()), torch.zeros(8, 1))
            opt_d.zero_grad()
            d_loss.backward()
            opt_d.step()
            g_loss = bce(disc(fake), torch.ones(8, 1))
            opt_g.zero_grad()
            g_loss.backward()
            opt_g.step()

    assert watched(train, WATCHERS) == []


def test_training_is_bit_for_bit_identical_under_the_watcher():
    def train():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        total = 0
        for _step in range(15):
            loss = nn.functional.cross_entropy(model(torch.randn(8, 16)), torch.randint(0, 4, (8,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss  # the leak: the watcher looks at it, and must not change anything
        return [p.detach().clone() for p in model.parameters()], total.item()

    plain = train()
    result = []
    findings = watched(lambda: result.append(train()), WATCHERS)
    assert codes(findings) == ["TP101"]
    watched_params, watched_total = result[0]
    assert watched_total == plain[1]
    assert all(torch.equal(a, b) for a, b in zip(plain[0], watched_params, strict=True))


# ------------------------------------------------------------------------------------ CUDA
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: allocator statistics")


@cuda
def test_cuda_allocated_memory_growth_is_tp151(tmp_path):
    out = run_source(tmp_path, """
import torch, torch.nn as nn
torch.manual_seed(0)
model = nn.Linear(64, 4096).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
kept = []
for step in range(45):
    out = model(torch.randn(512, 64, device="cuda"))
    loss = out.pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    kept.append(out.detach())
""", WATCHERS)
    f = _one(out, "TP151")
    assert f.extra["device"].startswith("cuda:")
    assert f.subject == "kept" and f.line == 13
    assert 7 << 20 <= f.extra["bytes_per_step"] <= 9 << 20  # 512 x 4096 float32 = 8 MiB per step


@cuda
def test_cuda_clean_loop_is_silent():
    def train():
        model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for _step in range(40):
            loss = nn.functional.cross_entropy(model(torch.randn(64, 64, device="cuda")),
                                               torch.randint(0, 10, (64,), device="cuda"))
            opt.zero_grad()
            loss.backward()
            opt.step()

    assert watched(train, WATCHERS) == []


@cuda
def test_cuda_cache_of_growing_shapes_is_tp152():
    def run():
        model = nn.Linear(256, 256).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        for step in range(12):
            x = torch.randn(32768 * (step + 1), 256, device="cuda")  # 32 MiB more every step
            loss = model(x).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            del x, loss

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()  # earlier tests' peaks would hide the gap
    findings = watched(run, WATCHERS)
    gaps = [f for f in findings if f.code == "TP152"]
    assert len(gaps) == 1 and gaps[0].severity.value == "info"
    assert "expandable_segments" in gaps[0].fix
    assert gaps[0].extra["reserved"] - gaps[0].extra["peak_allocated"] >= 1 << 29


def test_checks_have_complete_docs():
    from torchpact.watch.watchers.memory import MemoryWatcher

    assert [c.code for c in MemoryWatcher.checks] == ["TP101", "TP102", "TP151", "TP152"]
    for check in MemoryWatcher.checks:
        for section in ("## What it does", "## Why is this bad?", "## How to fix"):
            assert section in check.doc, (check.code, section)
