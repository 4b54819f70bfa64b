"""The runner: every fact in its own process; failures and time-outs are reported, the rest go on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from torchpact.facts import FAILED, TIMED_OUT, fact_from_module
from torchpact.facts.runner import run_facts

ROOT = Path(__file__).resolve().parents[2]


def _sample(name: str):
    return fact_from_module(f"tests.facts.samples.broken.{name}")


@pytest.fixture
def samples_importable(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie is dead too
        return fh.read().split()[2] != "Z"


def test_failures_and_time_outs_are_reported_and_the_rest_go_on(samples_importable, tmp_path, monkeypatch):
    pidfile = tmp_path / "grandchild.pid"
    monkeypatch.setenv("TORCHPACT_TEST_PIDFILE", str(pidfile))
    names = ["hangs", "raises", "dies", "bad_verdict", "holds"]
    start = time.monotonic()
    outcomes = {o.fact.id: o for o in run_facts([_sample(n) for n in names], jobs=2)}
    assert time.monotonic() - start < 300  # cut by the 3 s time-out, not the 600 s sleep (a loaded machine is slow)
    assert [o.fact.id for o in outcomes.values()] == ["hangs", "raises", "dies", "bad-verdict", "holds"]

    assert outcomes["holds"].verdict == "true" and outcomes["holds"].evidence == "1 + 1 == 2"
    assert outcomes["hangs"].verdict == TIMED_OUT
    assert outcomes["hangs"].evidence.startswith("no verdict within 3 s")
    assert outcomes["raises"].verdict == FAILED
    assert "RuntimeError: the experiment broke" in outcomes["raises"].evidence
    assert outcomes["dies"].verdict == FAILED and outcomes["dies"].evidence.startswith("exit code 3")
    assert outcomes["bad-verdict"].verdict == FAILED
    assert "run() returned 'maybe'" in outcomes["bad-verdict"].evidence
    for o in outcomes.values():
        assert not o.changed  # a failure is not a changed behaviour

    # the time-out ended the process the experiment had started too
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)


def test_run_one_runs_a_fact_in_a_fresh_interpreter():
    proc = subprocess.run([sys.executable, "-m", "torchpact.facts.run_one", "cpu-of-cpu-tensor-is-same-object"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["verdict"] == "true" and "t.cpu() is t: True" in result["evidence"]
    assert result["torch"].startswith("2.")

    proc = subprocess.run([sys.executable, "-m", "torchpact.facts.run_one", "no-such-fact"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no fact no-such-fact" in proc.stderr
