"""bench/lint_speed.py's measurement: every tool runs the same number of times, alternating with the
others on each folder, and its figure is the median of its own runs; the per-rule timing leaves the
registry as it found it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).parent.parent / "bench"
sys.path.insert(0, str(BENCH))  # the bench imports its neighbours (corpus, lint_split)
_spec = importlib.util.spec_from_file_location("lint_speed", BENCH / "lint_speed.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)


def test_each_tool_runs_as_often_as_the_other_alternating_on_each_folder(tmp_path):
    log = tmp_path / "log"
    folders = [tmp_path / "a", tmp_path / "b"]
    for f in folders:
        f.mkdir()

    def tool(name: str) -> list[str]:
        code = (f"import os, sys; open({str(log)!r}, 'a')"
                f".write({name!r} + os.path.basename(os.getcwd()) + sys.argv[1] + ' ')")
        return [sys.executable, "-c", code]

    runs = bench.compare({"torchpact": tool("t"), "ruff": tool("r")}, folders, 3, target="X")
    assert {k: len(v) for k, v in runs.items()} == {"torchpact": 3, "ruff": 3}
    assert log.read_text().split() == ["taX", "raX", "tbX", "rbX"] * 3
    assert all(t > 0 for v in runs.values() for t in v)


def test_the_figure_is_the_median_of_each_tool_s_runs(capsys):
    ratio = bench.line("x", {"torchpact": [1.0, 9.0, 2.0], "ruff": [1.0, 1.0, 0.5]})
    assert ratio == 2.0
    assert "median of 3 each" in capsys.readouterr().out


def test_rule_times_names_the_rules_that_ran_and_restores_the_registry(tmp_path):
    from torchpact.lint.registry import RuleSpec

    make = RuleSpec.__call__
    path = tmp_path / "t.py"
    path.write_text("import torch\nstate = torch.load('m.pt', weights_only=False)\n")
    spent, internal = bench.rule_times(str(path))
    assert "TP951" in spent and internal == []
    assert RuleSpec.__call__ is make
