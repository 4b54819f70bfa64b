"""Bad input never crashes lint: each bad file becomes an `input` finding and the rest are linted."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from torchpact.cli import main
from torchpact.config import Config
from torchpact.lint import lint_paths

LEAKY = Path(__file__).parent / "fixtures" / "leaky_train.py"


@pytest.fixture
def messy(tmp_path):
    shutil.copy(LEAKY, tmp_path / "good.py")
    (tmp_path / "syntax.py").write_text("import torch\ndef f(:\n    pass\n")
    (tmp_path / "latin.py").write_bytes(b"import torch\nx = '\xe9\xff'\n")
    (tmp_path / "binary.py").write_bytes(b"\x7fELF\x00\x00\x01\x02" * 64)
    (tmp_path / "deep.py").write_text("import torch\nx = " + "-" * 900 + "1\n")
    (tmp_path / "deeper.py").write_text("import torch\nx = " + "(" * 300 + "1" + ")" * 300 + "\n")
    (tmp_path / "broken.ipynb").write_text('{"cells": [ {"cell_type": "code", "source": ')
    (tmp_path / "notcells.ipynb").write_text('{"metadata": {}}')
    os.symlink(tmp_path / "nowhere.py", tmp_path / "dangling.py")
    unreadable = tmp_path / "secret.py"
    unreadable.write_text("import torch\n")
    unreadable.chmod(0)
    (tmp_path / "empty.py").write_text("")
    (tmp_path / "bom.py").write_bytes(b"\xef\xbb\xbfimport torch\n")
    (tmp_path / "cookie.py").write_bytes(b"# -*- coding: latin-1 -*-\nimport torch\nx = '\xe9'\n")
    return tmp_path


def test_every_bad_file_is_a_finding_and_good_files_are_still_linted(messy):
    result = lint_paths([str(messy)], Config(preview=True), jobs=1)
    by_file = {Path(f.path).name: f for f in result.findings if f.category.value == "input"}
    expected = {"syntax.py", "latin.py", "binary.py", "broken.ipynb", "notcells.ipynb", "dangling.py",
                "deeper.py"}
    if os.geteuid() != 0:  # root reads mode-0 files
        expected.add("secret.py")
    assert expected <= set(by_file), by_file
    assert {"empty.py", "bom.py", "cookie.py", "good.py"}.isdisjoint(by_file)
    assert by_file["syntax.py"].line == 2 and "cannot parse" in by_file["syntax.py"].message
    assert "utf-8" in by_file["latin.py"].message and by_file["latin.py"].line == 2
    assert "binary" in by_file["binary.py"].message
    assert "notebook" in by_file["broken.ipynb"].message
    assert "dangling" in by_file["dangling.py"].message
    assert "nested parentheses" in by_file["deeper.py"].message
    assert any(f.code == "TP101" and f.path.endswith("good.py") for f in result.findings)
    # 900 nested unary minus signs parse, then overflow a recursive visitor: ours is iterative
    assert "deep.py" not in by_file


def test_bad_input_cli_prints_no_traceback(messy, capsys):
    code = main(["lint", "--preview", str(messy), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in out + err
    doc = json.loads(out)
    assert all(f["code"] == "TP001" for f in doc["findings"] if f["category"] == "input")


def test_parallel_run_agrees_with_serial(messy):
    for i in range(30):
        shutil.copy(LEAKY, messy / f"copy{i}.py")
    serial = lint_paths([str(messy)], Config(preview=True), jobs=1).findings
    parallel = lint_paths([str(messy)], Config(preview=True), jobs=2).findings
    assert serial == parallel and len(parallel) > 30


@pytest.mark.parametrize("data", [
    b"import torch\n", b"", b"\xef\xbb\xbfimport torch\n", b"# -*- coding: latin-1 -*-\nx = '\xe9'\n",
    b"#!/usr/bin/env python\n# vim: set fileencoding=cp1252 :\nx = '\x80'\n", b"x = 1\n# coding: latin-1\n\xe9\n",
    b"x = '\xe9\xff'\n", b"import torch\n\nx = '\xe9'\n", b"\xef\xbb\xbf# coding: latin-1\n", b"# coding: nonesuch\n",
    b"\xef\xbb\xbfx = '\xe9'\n",
])
def test_a_file_is_decoded_as_tokenize_decodes_it(data):
    import io
    import tokenize

    from torchpact.lint.source import SourceError, decode_python

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        expected: object = data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError):
        expected = SourceError
    try:
        got: object = decode_python(data)
    except SourceError:
        got = SourceError
    assert got == expected
