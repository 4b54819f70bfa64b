"""The torch versions torchpact's runtime commands are tested on: stated once in pyproject's `torch`
extra, said at run time on another torch, and no runtime message dated to one torch version."""

from __future__ import annotations

import ast
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

from torchpact.cli import TORCH_TESTED, installed_torch_version, main, torch_support_note

ROOT = Path(__file__).resolve().parents[1]


def _torch_extra() -> Requirement:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [req] = [Requirement(r) for r in project["optional-dependencies"]["torch"]]
    return req


def test_the_torch_extra_states_the_tested_range_with_a_ceiling():
    spec = _torch_extra().specifier
    low, high = TORCH_TESTED
    assert {(s.operator, s.version) for s in spec} == {(">=", f"{low[0]}.{low[1]}"), ("<", f"{high[0]}.{high[1]}")}
    assert Version(installed_torch_version()) in spec  # the torch this suite runs on is inside it
    assert Version("2.14.1") in spec and Version("2.15.0") not in spec and Version("2.12.1") not in spec


def test_a_torch_outside_the_range_gets_a_one_line_note():
    assert torch_support_note(installed_torch_version()) is None
    for version in ("2.8.0+cu128", "2.15.0", "3.0.0"):
        note = torch_support_note(version)
        assert note is not None and "\n" not in note and f"torch {version} is outside" in note
        assert ">=2.13,<2.15" in note


def test_no_note_on_the_tested_torch(tmp_path, capsys):
    (tmp_path / "train.py").write_text("print('ok')\n")
    assert main(["run", "-q", str(tmp_path / "train.py")]) == 0
    assert "outside the versions" not in capsys.readouterr().err


def _dated_strings(path: Path) -> list[tuple[int, str]]:
    """String constants (f-string parts too) naming torch 2.13, other than docstrings and Check docs."""
    tree = ast.parse(path.read_text())
    skip = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)):
            skip.add(id(body[0].value))
        if isinstance(node, ast.keyword) and node.arg in ("doc", "summary", "severity_note"):
            skip.update(id(n) for n in ast.walk(node.value))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Check":
            # Check(code, category, severity, summary, doc)
            skip.update(id(n) for a in node.args[3:] for n in ast.walk(a))
    return [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and "2.13" in n.value and id(n) not in skip]


def test_runtime_messages_name_the_torch_they_ran_on_not_a_fixed_version():
    folders = ["audit", "watch", "launch", "integrations"]
    files = [p for f in folders for p in (ROOT / "src" / "torchpact" / f).rglob("*.py")]
    files += [ROOT / "src" / "torchpact" / "cli.py"]
    dated = {str(p.relative_to(ROOT)): found for p in files if (found := _dated_strings(p))}
    assert not dated, dated
