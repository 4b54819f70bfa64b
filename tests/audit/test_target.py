"""Loading FILE.py:FUNC / package.module:FUNC: every bad target is one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from torchpact.audit.target import TargetError, load_target
from torchpact.cli import main

HERE = Path(__file__).parent
TARGETS = HERE / "targets.py"


def test_file_target_returns_model_args_and_kwargs():
    t = load_target(f"{TARGETS}:kwargs_target")
    assert isinstance(t.model, torch.nn.Module) and t.args == () and set(t.kwargs) == {"x"}
    assert t.path == str(TARGETS)


def test_module_target(monkeypatch):
    monkeypatch.chdir(HERE.parent.parent)
    t = load_target("tests.audit.targets:clean")
    assert isinstance(t.model, torch.nn.Module) and len(t.args) == 1


@pytest.mark.parametrize("spec, message", [
    ("missing.py:make", "no such file: missing.py"),
    (f"{TARGETS}:nope", "has no function 'nope'"),
    (f"{TARGETS}:NOT_CALLABLE", "is a int, not a function"),
    (f"{TARGETS}:returns_model_only", "must return (model, args) or (model, args, kwargs), not a Clean"),
    (f"{TARGETS}:returns_wrong_model", "returned a str as the model; expected a torch.nn.Module"),
    (f"{TARGETS}:raises", "raised ValueError: no weights here"),
    (f"{TARGETS}:bad_kwargs", "returned a list as kwargs"),
    (str(TARGETS), "target must be FILE.py:FUNC or package.module:FUNC"),
    ("no_such_package.models:make", "no module named 'no_such_package.models'"),
])
def test_bad_targets_are_one_line(spec, message):
    with pytest.raises(TargetError) as info:
        load_target(spec)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_target_raising_names_the_line():
    with pytest.raises(TargetError, match=r"targets\.py:\d+\)"):
        load_target(f"{TARGETS}:raises")


def test_syntax_error_in_target_file(tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("def make(:\n    pass\n")
    with pytest.raises(TargetError, match="SyntaxError at line 1"):
        load_target(f"{bad}:make")


@pytest.mark.parametrize("command", ["export-check", "compile-check"])
def test_cli_bad_target_exits_2_with_one_line(command, capsys):
    code = main([command, f"{TARGETS}:raises"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0
    assert err.startswith("torchpact: error: ") and "ValueError: no weights here" in err


def test_cli_unknown_path_is_a_usage_error(capsys):
    assert main(["export-check", f"{TARGETS}:clean", "--paths", "trace,tflite"]) == 2
    assert "unknown path(s): tflite" in capsys.readouterr().err
