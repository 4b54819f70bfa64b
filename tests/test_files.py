"""Which files lint reads, and notebooks."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from torchpact.config import Config
from torchpact.lint import lint_paths
from torchpact.lint.files import discover

LEAKY = Path(__file__).parent / "fixtures" / "leaky_train.py"


def test_discovery_skips_vcs_venvs_and_gitignored(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    for rel in ["a.py", "pkg/b.py", "pkg/nb.ipynb", "build/gen.py", "pkg/skip_me.py", ".venv/lib/x.py",
                "env2/lib/y.py", ".git/hooks/h.py", "notes.txt", "pkg/sub/c.py", "pkg/sub/local.py"]:
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("import torch\n")
    (tmp_path / "env2" / "pyvenv.cfg").write_text("home = /usr\n")
    (tmp_path / ".gitignore").write_text("build/\nskip_me.py\n")
    (tmp_path / "pkg" / "sub" / ".gitignore").write_text("local.py\n")
    found = sorted(Path(p).relative_to(tmp_path).as_posix() for p in discover([str(tmp_path)]))
    assert found == ["a.py", "pkg/b.py", "pkg/nb.ipynb", "pkg/sub/c.py"]
    # a file named explicitly is linted whatever its suffix or ignore status
    assert list(discover([str(tmp_path / "notes.txt")])) == [str(tmp_path / "notes.txt")]
    assert [Path(p).name for p in discover([str(tmp_path)], exclude=["pkg/sub/"])] == ["a.py", "b.py", "nb.ipynb"]


def _notebook(cells):
    return json.dumps({"cells": [{"cell_type": t, "source": s, "metadata": {}, "outputs": []} for t, s in cells],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def test_notebook_findings_carry_cell_and_line(tmp_path):
    body = LEAKY.read_text().splitlines(keepends=True)
    nb = tmp_path / "train.ipynb"
    nb.write_text(_notebook([
        ("markdown", "# Training\n"),
        ("code", ["%matplotlib inline\n", "!nvidia-smi\n", "import torch\n"]),
        ("code", body[:6]),
        ("code", body[6:]),
    ]))
    findings = lint_paths([str(nb)], Config()).findings
    [f] = [f for f in findings if f.code == "TP101"]
    assert (f.cell, f.line, f.column) == (3, 8, 5)


def test_notebook_cell_magic_and_syntax_error_cell(tmp_path):
    nb = tmp_path / "bad.ipynb"
    nb.write_text(_notebook([("code", "%%bash\necho hi\n"), ("code", "import torch\n"), ("code", "def f(:\n")]))
    [f] = lint_paths([str(nb)], Config()).findings
    assert f.category.value == "input" and (f.cell, f.line) == (3, 1)
