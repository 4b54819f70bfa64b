"""Real, correct training scripts of pytorch/examples (bench/realscripts/) run under every default
watcher without a warning or an error: the watchers' false-alarm guard on code nobody wrote for them.

The three cheapest of the bench: a CNN classifier (Adadelta, StepLR, evaluation under no_grad), a
policy gradient (REINFORCE on CartPole, dropout in the policy) and a graph network (sparse matmuls,
Adam with weight decay). ``bench/realscripts/run.py`` runs all of them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from torchpact.launch.single import run_script

REALSCRIPTS = Path(__file__).resolve().parents[2] / "bench" / "realscripts"


@pytest.mark.parametrize("script, args", [
    ("mnist.py", ["--epochs", "1", "--batch-size", "32", "--test-batch-size", "64"]),
    ("reinforce.py", []),
    ("gcn.py", ["--epochs", "6", "--val-every", "3"]),
])
def test_real_script_has_no_warning_or_error(script, args, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REALSCRIPTS))
    import _synth
    monkeypatch.setattr(_synth, "TRAIN_SIZE", 128)  # 4 steps of 32 images are enough to exercise the watchers
    monkeypatch.setattr(_synth, "TEST_SIZE", 64)
    monkeypatch.chdir(tmp_path)  # gcn writes its synthetic Cora files to ./cora
    outcome = run_script(str(REALSCRIPTS / script), args, live=False)
    assert outcome.exit_code == 0 and outcome.error is None, outcome.error
    assert outcome.steps > 0
    alarms = [f"{f.code} {f.severity.value} {f.path}:{f.line} {f.message}" for f in outcome.findings
              if f.severity.value in ("warning", "error")]
    assert not alarms
