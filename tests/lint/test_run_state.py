"""A lint run keeps its state (fix flag, project facts, rule selection) in objects it owns, not in
module globals: a run leaves nothing behind for the next one."""

from __future__ import annotations

import torchpact.lint as lint
from torchpact.config import Config
from torchpact.lint.engine import RuleSelection, enabled_rules


def test_a_serial_run_leaves_no_worker_state(tmp_path):
    (tmp_path / "train.py").write_text("import torch\nx = torch.load('m.pt')\n")
    result = lint.lint_paths([str(tmp_path)], Config(), jobs=1, fix=True, write=False)
    assert [r.path for r in result.files] == [str(tmp_path / "train.py")]
    assert lint._worker_pass is None


def test_a_selection_works_out_each_configuration_once_and_agrees_with_enabled_rules():
    selection = RuleSelection()
    config = Config(select=["TP1"], ignore=["TP101"])
    first = selection.enabled(config, "a.py")
    assert selection.enabled(Config(select=["TP1"], ignore=["TP101"]), "b.py") is first
    assert first == enabled_rules(config, "a.py") and {r.code[:3] for r in first} == {"TP1"}
    assert "TP101" not in {r.code for r in first}
