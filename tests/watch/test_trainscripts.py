"""Correct training scripts written for the bench (bench/trainscripts/) run under every default
watcher without a warning or an error: the watchers' false-alarm guard on ordinary training code.
The script that keeps a bug on purpose (cross_entropy over one logit) gets TP252 and nothing else.

The cheapest of the bench, shortened: a CNN classifier (Adadelta, StepLR, evaluation under no_grad),
REINFORCE (dropout in the policy, one step per episode), a graph network (sparse matmuls, Adam with
weight decay). ``bench/trainscripts/run.py`` runs all of them at full length.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from torchpact.launch.single import run_script

SCRIPTS = Path(__file__).resolve().parents[2] / "bench" / "trainscripts"


def alarms(outcome) -> list[str]:
    return [f"{f.code} {f.severity.value} {f.path}:{f.line} {f.message}" for f in outcome.findings
            if f.severity.value in ("warning", "error")]


@pytest.mark.parametrize("script, args", [
    ("cnn_classifier.py", ["--epochs", "1", "--train", "128", "--test", "64"]),
    ("policy_gradient.py", ["--episodes", "6"]),
    ("gcn.py", ["--epochs", "6", "--eval-every", "3", "--nodes", "300"]),
])
def test_correct_script_has_no_warning_or_error(script, args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outcome = run_script(str(SCRIPTS / script), args, live=False)
    assert outcome.exit_code == 0 and outcome.error is None, outcome.error
    assert outcome.steps > 0
    assert not alarms(outcome)


def test_single_logit_cross_entropy_gets_tp252_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outcome = run_script(str(SCRIPTS / "single_logit_ce.py"), ["--epochs", "1", "--samples", "224"], live=False)
    assert outcome.exit_code == 0 and outcome.error is None, outcome.error
    assert [a.split()[0] for a in alarms(outcome)] == ["TP252"]
