"""A rule that does not finish a file (out of its time budget, or failing) is never a quiet success:
the summary names it and where it stopped, and its TP002 is a warning that the default --fail-on sees."""

from __future__ import annotations

import json

import pytest

from torchpact.cli import main

# One training loop that accumulates a graph-attached loss (TP101), repeated into a generated file.
LOOP = """def train_{i}(model, opt, data):
    running = 0
    for x, y in data:
        loss = model(x).sum()
        loss.backward()
        running += loss
    return running
"""


@pytest.fixture
def big(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "big.py").write_text("import torch\n\n" + "\n".join(LOOP.format(i=i) for i in range(1500)))
    # no CPU time at all: every rule that gets nodes stops at its first check, on any machine
    monkeypatch.setenv("TORCHPACT_RULE_BUDGET", "0")
    return tmp_path / "big.py"


def _lint(capsys, *args):
    code = main(["lint", "--no-cache", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_rule_out_of_time_is_named_with_its_place_and_the_exit_is_not_clean(big, capsys):
    code, out, _ = _lint(capsys, big, "--select", "TP101")
    assert code == 1  # default --fail-on warning: findings may be missing, so not a pass
    summary = out.strip().splitlines()[-1]
    assert summary.startswith("1 rule stopped before the end of a file")
    assert "TP101 at big.py:" in summary and "(out of time)" in summary
    stopped = [line for line in out.splitlines() if " TP002 warning " in line]
    assert len(stopped) == 1 and "TP101" in stopped[0] and "TORCHPACT_RULE_BUDGET" in stopped[0]


def test_fail_on_error_decides_as_for_any_warning(big, capsys):
    code, _, _ = _lint(capsys, big, "--select", "TP101", "--fail-on", "error")
    assert code == 0


def test_the_json_summary_lists_the_rules_that_did_not_finish(big, capsys):
    code, out, _ = _lint(capsys, big, "--select", "TP101", "--format", "json")
    doc = json.loads(out)
    assert code == 1
    [entry] = doc["summary"]["unfinished"]
    assert entry["rule"] == "TP101" and entry["stopped"] == "out of time" and entry["path"] == "big.py"
    assert isinstance(entry["line"], int) and entry["line"] > 1


def test_a_finished_run_has_no_such_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "small.py").write_text("import torch\n" + LOOP.format(i=0))
    code, out, _ = _lint(capsys, "small.py", "--select", "TP101", "--format", "json")
    assert "unfinished" not in json.loads(out)["summary"]


def test_a_budget_that_is_not_a_number_is_a_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "small.py").write_text("x = 1\n")
    monkeypatch.setenv("TORCHPACT_RULE_BUDGET", "lots")
    code, _, err = _lint(capsys, "small.py")
    assert code == 2 and "TORCHPACT_RULE_BUDGET" in err
