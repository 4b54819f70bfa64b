"""Which files lint reads, and notebooks."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import pytest

from torchpact.config import Config
from torchpact.lint import lint_paths
from torchpact.lint.files import discover, excluded_by

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
    excluded = excluded_by(lambda path: Config(exclude=["pkg/sub/"], root=tmp_path))
    assert [Path(p).name for p in discover([str(tmp_path)], excluded)] == ["a.py", "b.py", "nb.ipynb"]


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
    findings = lint_paths([str(nb)], Config(preview=True)).findings
    [f] = [f for f in findings if f.code == "TP101"]
    # cells are counted as ruff counts them: position among all cells, markdown included
    assert (f.cell, f.line, f.column) == (4, 8, 5)


def test_notebook_cell_magic_and_syntax_error_cell(tmp_path):
    nb = tmp_path / "bad.ipynb"
    nb.write_text(_notebook([("code", "%%bash\necho hi\n"), ("code", "import torch\n"), ("code", "def f(:\n")]))
    [f] = lint_paths([str(nb)], Config(preview=True)).findings
    assert f.category.value == "input" and (f.cell, f.line, f.column) == (3, 1, 7)


IPYTHON_CELL = """\
files = !ls
%time x = f()
%matplotlib inline
!pip install torch
?torch.nn
torch.nn.Linear?
torch.optim.SGD??
pip install einops
%load_ext autoreload
for name in files:
    !echo $name \\
        done
a, b = %who_ls
/print files
"""


def test_every_ipython_form_parses_and_keeps_columns(tmp_path):
    body = LEAKY.read_text().splitlines(keepends=True)
    loop = body[6:]  # `total = 0` ... the loop that keeps the graph
    loop[7] = loop[7].replace("total += loss", "%time total += loss")
    nb = tmp_path / "magic.ipynb"
    nb.write_text(_notebook([
        ("markdown", "# magics\n"),
        ("code", body[:6]),
        ("code", IPYTHON_CELL),
        ("code", ["%%capture out\n", "import torch\n"]),
        ("code", "%%bash\nfor f in *; do echo (; done\n"),
        ("code", "%%writefile helper.py\ndef broken(:\n"),
        ("code", "  # indented cell, dedented by IPython\n  y = 2\n"),
        ("code", loop),
    ]))
    findings = lint_paths([str(nb)], Config(preview=True)).findings
    assert [f.category.value for f in findings] == ["memory"], findings
    [f] = findings
    # `    %time total += loss`: `total` is where the user sees it, after the magic
    assert (f.code, f.cell, f.line, f.column) == ("TP101", 8, 8, 11)


def test_an_invalid_cell_is_one_finding_and_the_others_are_linted(tmp_path):
    body = LEAKY.read_text()
    nb = tmp_path / "half.ipynb"
    nb.write_text(_notebook([("code", "import torch\n"), ("code", "x = [1,\n  2\nprint(x)\n"), ("code", body)]))
    bad, leak = lint_paths([str(nb)], Config(preview=True)).findings
    assert bad.code == "TP001" and bad.cell == 2 and "cannot parse this cell" in bad.message
    assert (leak.code, leak.cell, leak.line) == ("TP101", 3, 14)


def _nbformat_text(cells) -> str:
    """A notebook written the way nbformat writes it: indent 1, non-ASCII kept, final newline."""
    doc = {"cells": [
        {"cell_type": t, "execution_count": 1, "metadata": {}, "outputs": [
            {"name": "stdout", "output_type": "stream", "text": ["données\n"]}], "source": s}
        if t == "code" else {"cell_type": t, "metadata": {}, "source": s} for t, s in cells],
        "metadata": {"kernelspec": {"name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def test_fix_and_diff_rewrite_only_the_fixed_cell(tmp_path, capsys):
    from torchpact.cli import main

    body = LEAKY.read_text().splitlines(keepends=True)
    body[13] = body[13].replace("total += loss", "%time total += loss")
    original = _nbformat_text([("markdown", ["# Réseau\n"]), ("code", ["!nvidia-smi\n"]), ("code", body)])
    nb = tmp_path / "train.ipynb"
    nb.write_text(original, encoding="utf-8")

    assert main(["lint", "--preview", str(nb), "--diff"]) == 1
    out, _ = capsys.readouterr()
    assert nb.read_text(encoding="utf-8") == original
    assert f"{nb}:cell 3" in out and "+    %time total += loss.detach()\n" in out

    assert main(["lint", "--preview", str(nb), "--fix"]) == 0
    fixed = nb.read_text(encoding="utf-8")
    expected = original.replace('"    %time total += loss\\n"', '"    %time total += loss.detach()\\n"')
    assert fixed == expected != original  # outputs, layout and the other cells untouched


@pytest.mark.parametrize("python", [
    "x = a != b\ny = a % b\nz = '%time !ls ?'\n",
    "s = '''\n!not a command\n%not a magic\n'''\n",
    "d = {\n    'k': 1,\n}\nprint(d)  # what?\n",
    "if x:\n    pass\n",
])
def test_plain_python_is_never_rewritten(python):
    from torchpact.lint.ipython import transform_cell

    code = transform_cell(python)
    assert code.text == python and not code.opaque and code.error is None


IPYTHON_FORMS = [
    "files = !ls\n", "d[0] = !!ls -la\n", "a, b = %who_ls\n", "%time x = f()\n", "%timeit -n 10 f(x)\n",
    "%matplotlib inline\n", "!pip install torch\n", "!ls \\\n  -la\n", "?torch.nn\n", "torch.nn.Linear?\n",
    "torch.optim.SGD??\n", "for i in r:\n    !echo $i\n    x.mean?\n", "/print a b\n", ",print a b\n",
    ";print a b\n", "%%time\nx = 1\n", "%%capture out\nimport torch\n", "%%bash\necho (\n",
    "%%writefile m.py\ndef (:\n", "  x = 1\n  y = 2\n", ">>> x = 1\n>>> for i in r:\n...     y = i\n",
    "In [1]: x = 1\n   ...: y = 2\n",
]


def _bound(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


@pytest.mark.parametrize("cell", IPYTHON_FORMS)
def test_ipython_forms_are_read_as_ipython_reads_them(cell):
    """IPython's own transformer is the oracle: each form is one it turns into Python, and ours gives
    Python of the cell's exact shape that binds at least the names IPython's binds."""
    from torchpact.lint.ipython import transform_cell

    manager = pytest.importorskip("IPython.core.inputtransformer2").TransformerManager()
    theirs = ast.parse(manager.transform_cell(cell))
    ours = transform_cell(cell)
    assert ours.error is None and len(ours.text) == len(cell) and ours.text.count("\n") == cell.count("\n")
    assert _bound(theirs) <= _bound(ast.parse(ours.prefix + ours.text))
