"""ruff's conventions, as users carry them: missing paths, standard input, --exit-zero, --statistics,
--add-noqa, extend-select / extend-exclude, unused `# noqa` codes (TP005, off by default) and the
split between safe and unsafe fixes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from torchpact.cli import main

LEAKY = Path(__file__).parent / "fixtures" / "leaky_train.py"

# TP403's fix (nn.ModuleList) adds the layers' parameters to the model's state_dict: unsafe
PLAIN_LIST = """import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = [nn.Linear(4, 4), nn.Linear(4, 4)]

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
"""


def lint(capsys, *args):
    code = main(["lint", "--preview", "--no-cache", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def torchpact(*args, stdin: str | None = None, cwd: Path) -> subprocess.CompletedProcess:
    """The real program, with a real pipe on standard input."""
    return subprocess.run([sys.executable, "-m", "torchpact", "lint", "--preview", "--no-cache", *args], input=stdin,
                          capture_output=True, text=True, cwd=cwd, timeout=300, env={"NO_COLOR": "1", "PATH": ""})


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(LEAKY, tmp_path / "leaky.py")
    return tmp_path


# ------------------------------------------------------------------------------------- missing paths
def test_a_missing_path_is_a_finding_and_the_other_paths_are_linted(project, capsys):
    (project / "clean.py").write_text("x = 1\n")
    code, out, _ = lint(capsys, "leaky.py", "clean.py", "missing.py", "--format", "json")
    doc = json.loads(out)
    assert code == 1
    found = {(f["path"], f["code"]) for f in doc["findings"]}
    assert ("missing.py", "TP001") in found and ("leaky.py", "TP101") in found
    assert doc["summary"]["files"] == 2
    [missing] = [f for f in doc["findings"] if f["path"] == "missing.py"]
    assert "no such file or folder" in missing["message"]


def test_only_missing_paths_still_report_them(project, capsys):
    code, out, err = lint(capsys, "gone.py")
    assert code == 1 and "gone.py: TP001 error no such file or folder" in out and "no Python files" not in err


# ------------------------------------------------------------------------------------ standard input
def test_lint_dash_reads_standard_input_as_the_stdin_filename(project):
    (project / "pkg").mkdir()
    (project / "pkg" / "pyproject.toml").write_text('[tool.torchpact]\nper-file-ignores = {"quiet.py" = ["TP101"]}\n')
    done = torchpact("-", "--stdin-filename", "pkg/train.py", stdin=LEAKY.read_text(), cwd=project)
    assert done.returncode == 1 and done.stdout.startswith("pkg/train.py:14:5: TP101"), done.stdout + done.stderr
    assert "   14 |     total += loss" in done.stdout  # the snippet comes from standard input, not the disk
    # the name's configuration applies: its per-file ignores silence it
    quiet = torchpact("-", "--stdin-filename", "pkg/quiet.py", stdin=LEAKY.read_text(), cwd=project)
    assert quiet.returncode == 0 and "No findings." in quiet.stdout


def test_lint_dash_with_fix_prints_the_fixed_source_and_reports_on_stderr(project):
    done = torchpact("--fix", "-", "--stdin-filename", "train.py", stdin=LEAKY.read_text(), cwd=project)
    assert done.stdout == LEAKY.read_text().replace("total += loss", "total += loss.detach()")
    assert done.returncode == 0 and "1 fix applied" in done.stderr and "No findings." in done.stderr
    # nothing to fix: the source passes through unchanged
    same = torchpact("--fix", "-", "--stdin-filename", "ok.py", stdin="x = 1\n", cwd=project)
    assert same.stdout == "x = 1\n" and same.returncode == 0


def test_lint_dash_skips_an_excluded_name_with_force_exclude(project):
    (project / "pyproject.toml").write_text('[tool.torchpact]\nexclude = ["gen/"]\n')
    done = torchpact("--force-exclude", "--fix", "-", "--stdin-filename", "gen/train.py", stdin=LEAKY.read_text(),
                     cwd=project)
    assert done.returncode == 0 and done.stdout == LEAKY.read_text() and done.stderr == ""


def test_dash_among_other_paths_is_a_usage_error(project, capsys):
    code, _, err = lint(capsys, "-", "leaky.py")
    assert code == 2 and "standard input" in err


# ----------------------------------------------------------------------------- exit-zero, statistics
def test_exit_zero_reports_but_exits_0(project, capsys):
    code, out, _ = lint(capsys, "leaky.py", "--exit-zero")
    assert code == 0 and "TP101" in out


def test_statistics_counts_findings_per_code(project, capsys):
    (project / "more.py").write_text(LEAKY.read_text() + "\n" + PLAIN_LIST)
    code, out, _ = lint(capsys, "leaky.py", "more.py", "--statistics")
    assert code == 1
    assert out.splitlines() == ["2\tTP101\t[*] graph-accumulated-across-iterations",
                                "1\tTP403\tsubmodules-in-plain-container"]  # an unsafe fix is not [*]
    code, out, _ = lint(capsys, "leaky.py", "more.py", "--statistics", "--format", "json")
    assert json.loads(out)[0] == {"code": "TP101", "name": "graph-accumulated-across-iterations", "count": 2,
                                  "fixable": True}


# ------------------------------------------------------------------------------------------ add-noqa
def test_add_noqa_silences_what_is_reported_and_merges_into_existing_comments(project, capsys):
    text = LEAKY.read_text().replace("total += loss", "total += loss  # noqa: E501")
    (project / "leaky.py").write_text(text + "\n" + PLAIN_LIST)
    code, _, err = lint(capsys, "leaky.py", "--add-noqa")
    assert code == 0 and "added 2 noqa directives" in err
    after = (project / "leaky.py").read_text()
    assert "total += loss  # noqa: E501, TP101" in after
    assert "self.layers = [nn.Linear(4, 4), nn.Linear(4, 4)]  # noqa: TP403" in after
    assert lint(capsys, "leaky.py")[0] == 0


def test_add_noqa_leaves_lines_a_comment_cannot_end(project, capsys):
    source = ("import torch\n\n\ndef f(model, data):\n    s = 0\n    for x in data:\n"
              "        loss = model(x).sum()\n        loss.backward()\n        s += \\\n            loss\n"
              "    return s\n")
    (project / "cont.py").write_text(source)
    code, _, err = lint(capsys, "cont.py", "--add-noqa")
    assert code == 0 and "1 line left without `# noqa`" in err and (project / "cont.py").read_text() == source
    compile((project / "cont.py").read_text(), "cont.py", "exec")


def test_add_noqa_in_a_notebook_writes_the_cell(project, capsys):
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["# notes"]},
             {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
              "source": ["import torch\n", "x = torch.range(0, 3)\n"]}]
    (project / "n.ipynb").write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    assert lint(capsys, "n.ipynb")[0] == 1
    code, _, err = lint(capsys, "n.ipynb", "--add-noqa")
    assert code == 0 and "added 1 noqa directive" in err
    cell = json.loads((project / "n.ipynb").read_text())["cells"][1]["source"]
    assert cell == ["import torch\n", "x = torch.range(0, 3)  # noqa: TP313\n"]
    assert lint(capsys, "n.ipynb")[0] == 0


# ------------------------------------------------------------------------- extend-select / -exclude
def test_extend_select_adds_to_select_in_config_and_on_the_command_line(project, capsys):
    (project / "more.py").write_text(PLAIN_LIST)
    (project / "pyproject.toml").write_text('[tool.torchpact]\nselect = ["TP101"]\nextend-select = ["TP403"]\n')
    _, out, _ = lint(capsys, "leaky.py", "more.py", "--format", "json")
    assert {f["code"] for f in json.loads(out)["findings"]} == {"TP101", "TP403"}
    # --select replaces both, as in ruff; --extend-select adds to it
    _, out, _ = lint(capsys, "leaky.py", "more.py", "--format", "json", "--select", "TP101")
    assert {f["code"] for f in json.loads(out)["findings"]} == {"TP101"}
    _, out, _ = lint(capsys, "leaky.py", "more.py", "--format", "json", "--select", "TP101", "--extend-select",
                     "TP403")
    assert {f["code"] for f in json.loads(out)["findings"]} == {"TP101", "TP403"}
    code, _, err = lint(capsys, "leaky.py", "--extend-select", "TP4033")
    assert code == 2 and "unknown selector 'TP4033' in --extend-select" in err


def test_extend_exclude_adds_to_exclude(project, capsys):
    for folder in ("build", "gen"):
        (project / folder).mkdir()
        shutil.copy(LEAKY, project / folder / "t.py")
    (project / "pyproject.toml").write_text('[tool.torchpact]\nexclude = ["build/"]\nextend-exclude = ["gen/"]\n')
    _, out, _ = lint(capsys, ".", "--format", "json")
    assert {f["path"] for f in json.loads(out)["findings"]} == {"leaky.py"}


# --------------------------------------------------------------------------------- TP005 unused noqa
STALE = """import torch


def train(model, data):
    total = 0
    for x in data:
        loss = model(x).sum()
        loss.backward()
        total += loss  # noqa: TP101
    n = len(data)  # noqa: TP101, E501
    m = n  # noqa: TP1011
    k = m  # noqa
    return total, "# noqa: TP102", k
"""


def test_unused_noqa_codes_are_off_by_default(project, capsys):
    (project / "stale.py").write_text(STALE)
    _, out, _ = lint(capsys, "stale.py", "--format", "json")
    assert not [f for f in json.loads(out)["findings"] if f["code"] == "TP005"]


def test_unused_and_unknown_torchpact_codes_are_tp005_when_selected(project, capsys):
    (project / "stale.py").write_text(STALE)
    code, out, _ = lint(capsys, "stale.py", "--extend-select", "TP005", "--format", "json")
    found = [(f["line"], f["subject"]) for f in json.loads(out)["findings"] if f["code"] == "TP005"]
    # line 9 silences a real TP101; E501 is another tool's; a bare noqa and a string are not judged
    assert found == [(10, "TP101"), (11, "TP1011")] and code == 1
    messages = [f["message"] for f in json.loads(out)["findings"] if f["code"] == "TP005"]
    assert "reports nothing on this line" in messages[0] and "no lint rule's code" in messages[1]


def test_the_tp005_fix_removes_only_the_unused_codes(project, capsys):
    (project / "stale.py").write_text(STALE)
    lint(capsys, "stale.py", "--extend-select", "TP005", "--fix")
    after = (project / "stale.py").read_text()
    assert "total += loss  # noqa: TP101\n" in after  # used: kept
    assert "    n = len(data)  # noqa: E501\n" in after and "    m = n\n" in after and "k = m  # noqa\n" in after
    code, out, _ = lint(capsys, "stale.py", "--extend-select", "TP005")
    assert code == 0, out


def test_no_tp005_fix_where_text_follows_the_codes(project, capsys):
    # taking TP999 out would leave `# noqa - reason`: a bare noqa that silences every code
    (project / "why.py").write_text("import torch\nx = 1  # noqa: TP999 - kept for the old API\n")
    code, out, _ = lint(capsys, "why.py", "--extend-select", "TP005", "--fix", "--format", "json")
    assert (project / "why.py").read_text() == "import torch\nx = 1  # noqa: TP999 - kept for the old API\n"
    [f] = json.loads(out)["findings"]
    assert f["code"] == "TP005" and "fixable" not in (f.get("extra") or {})


# ------------------------------------------------------------------------------- safe / unsafe fixes
def test_fix_applies_safe_fixes_only_and_unsafe_fixes_adds_the_others(project, capsys):
    (project / "net.py").write_text(PLAIN_LIST)
    code, out, _ = lint(capsys, "net.py", "leaky.py", "--format", "json")
    applicability = {f["code"]: f["extra"]["fix_applicability"] for f in json.loads(out)["findings"]}
    assert applicability == {"TP101": "safe", "TP403": "unsafe"}
    _, out, _ = lint(capsys, "net.py", "leaky.py")
    assert "1 fixable with --fix; 1 more with --fix --unsafe-fixes" in out
    lint(capsys, "net.py", "leaky.py", "--fix")
    assert "nn.ModuleList" not in (project / "net.py").read_text()  # the state_dict's keys stay as they were
    assert "total += loss.detach()" in (project / "leaky.py").read_text()
    lint(capsys, "net.py", "--fix", "--unsafe-fixes")
    assert "self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])" in (project / "net.py").read_text()


def test_unsafe_fixes_in_the_configuration(project, capsys):
    (project / "net.py").write_text(PLAIN_LIST)
    (project / "pyproject.toml").write_text("[tool.torchpact]\nunsafe-fixes = true\n")
    lint(capsys, "net.py", "--fix")
    assert "nn.ModuleList" in (project / "net.py").read_text()


def test_every_unsafe_fix_says_why_on_its_page():
    from torchpact.lint.registry import all_rules

    unsafe = [r for r in all_rules() if r.unsafe_fix]
    assert {r.code for r in unsafe} >= {"TP403"}
    for r in unsafe:
        assert r.fixable and r.sections().get("Fix safety"), r.code
