"""What `torchpact run` accepts: a Python script, or `-m package.module` as `python -m` runs it; any
other file is refused in one line (exit 2) before anything runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from torchpact.cli import main

SHOW = textwrap.dedent('''
    import json
    import sys

    import torch
    import torch.nn as nn

    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    total = 0
    for step in range(10):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss  # TP101, in the module's own file
    print(json.dumps({"path0": sys.path[0], "argv": sys.argv, "name": __name__, "file": __file__,
                      "spec": __spec__.name if __spec__ else None, "package": __package__}))
''')


@pytest.fixture
def project(tmp_path):
    # a run in this process imports the project's package, as python -m does: each test gets its own
    _forget_pkg()
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text(SHOW)
    (tmp_path / "pkg" / "__main__.py").write_text(SHOW)
    yield tmp_path
    _forget_pkg()


def _forget_pkg():
    for name in [m for m in sys.modules if m == "pkg" or m.startswith("pkg.")]:
        del sys.modules[name]


def _cli(cwd, *args):
    report = cwd / "report.json"
    out = subprocess.run([sys.executable, "-m", "torchpact", "run", "-q", "--format", "json", "--output", str(report),
                          *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    return out, (json.loads(report.read_text()) if report.exists() else None)


def _python(cwd, *args):
    out = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("module", ["pkg.train", "pkg"])
def test_a_module_runs_as_python_m_runs_it(project, module):
    out, report = _cli(project, "-m", module, "--lr", "3e-4", "-q")
    assert out.returncode == 1, out.stderr[-2000:]  # TP101
    seen = json.loads(out.stdout.splitlines()[-1])
    assert seen == _python(project, "-m", module, "--lr", "3e-4", "-q")  # sys.path[0], argv, __main__, __spec__
    assert seen["path0"] == str(project) and seen["argv"][1:] == ["--lr", "3e-4", "-q"]
    [leak] = report["findings"]
    assert leak["code"] == "TP101" and leak["line"] == 16
    assert leak["path"] == ("pkg/train.py" if module == "pkg.train" else "pkg/__main__.py")
    assert report["command"] == f"run -m {module} --lr 3e-4 -q"


@pytest.mark.parametrize("module, message", [
    ("nope", "no module named nope"),
    ("pkg.nope", "no module named pkg.nope"),
    ("pkg.train.py", "-m takes a module name: -m pkg.train, not pkg.train.py"),  # nothing of pkg runs
    ("pkg/train.py", "-m takes a module name: -m pkg.train, not pkg/train.py"),
])
def test_a_module_that_is_not_there_is_one_line(project, monkeypatch, capsys, module, message):
    monkeypatch.chdir(project)
    assert main(["run", "-q", "-m", module]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"torchpact: error: {message}\n"


@pytest.mark.parametrize("args, message", [
    ([], "run needs a SCRIPT (or -m MODULE)"),
    (["-m"], "-m needs a module name"),
    (["train.py", "-m", "pkg"], None),  # after SCRIPT, -m is the script's own argument
])
def test_script_or_module(project, monkeypatch, capsys, args, message):
    monkeypatch.chdir(project)
    (project / "train.py").write_text("import sys\nprint(sys.argv[1:])\n")
    code = main(["run", "-q", *args])
    out, err = capsys.readouterr()
    if message is None:
        assert code == 0 and out.startswith("['-m', 'pkg']\n")
    else:
        assert code == 2 and err.startswith(f"torchpact: error: {message}")


NOT_PYTHON = {
    "train.sh": (b"#!/bin/bash\npython train.py --lr 3e-4\n", "its first line runs /bin/bash"),
    "config.yaml": (b"model:\n  layers: [64, 64\n", "it does not parse as Python"),
    "notes.txt": (b"train the model for 3 epochs\n", "it does not parse as Python"),
    "model.pt": (b"PK\x03\x04\x00\x00\x08\x08\x00\x00" + bytes(range(256)), "a binary file"),
    "analysis.ipynb": (b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}', "a notebook"),
}


@pytest.mark.parametrize("name", sorted(NOT_PYTHON))
def test_a_file_that_is_not_python_is_refused_in_one_line(tmp_path, name):
    content, why = NOT_PYTHON[name]
    (tmp_path / name).write_bytes(content)
    out = subprocess.run([sys.executable, "-m", "torchpact", "run", name], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 2 and out.stdout == ""
    [line] = out.stderr.splitlines()
    assert line.startswith(f"torchpact: error: {name} is not a Python script") and why in line


@pytest.mark.parametrize("name, content", [
    ("train", "#!/usr/bin/env python3\nprint('ran')\n"),     # an executable script without the suffix
    ("train.cfg", "print('ran')\n"),                          # Python source under another name
])
def test_python_source_under_another_name_still_runs(tmp_path, monkeypatch, capsys, name, content):
    (tmp_path / name).write_text(content)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "-q", name]) == 0
    assert capsys.readouterr().out.startswith("ran\n")


def test_a_py_file_with_a_syntax_error_is_the_scripts_own_error(tmp_path, monkeypatch, capsys):
    # as python reports it: a traceback, exit 1, and TP003 — not a usage error
    (tmp_path / "train.py").write_text("def f(:\n    pass\n")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "-q", "--format", "json", "--output", "r.json", "train.py"]) == 1
    assert "SyntaxError" in capsys.readouterr().err
    [crash] = json.loads((tmp_path / "r.json").read_text())["findings"]
    assert crash["code"] == "TP003" and "SyntaxError" in crash["message"]


def test_nproc_runs_a_module_on_every_rank(project):
    (project / "pkg" / "ranks.py").write_text(textwrap.dedent('''
        import json, os, sys
        with open(f"rank{os.environ['RANK']}.json", "w") as fh:
            json.dump({"path0": sys.path[0], "argv": sys.argv, "name": __name__}, fh)
    '''))
    out, report = _cli(project, "--nproc", "2", "-m", "pkg.ranks", "--epochs", "1")
    assert out.returncode == 0, out.stderr[-2000:]
    for rank in (0, 1):
        seen = json.loads((project / f"rank{rank}.json").read_text())
        assert seen == {"path0": str(project), "argv": [str(project / "pkg" / "ranks.py"), "--epochs", "1"],
                        "name": "__main__"}
    assert report["command"] == "run -m pkg.ranks --epochs 1"
    assert os.path.basename(report["summary"]["script"]) == "-m pkg.ranks"
