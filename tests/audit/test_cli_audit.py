"""The export-check and compile-check commands end to end: formats, exit codes, summary.paths."""

from __future__ import annotations

import json

from tests.audit.util import TARGETS, marker_line
from torchpact.cli import main


def run(args, capsys):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_export_check_json_report(capsys, tmp_path):
    out_file = tmp_path / "report.json"
    code, out, _ = run(["export-check", f"{TARGETS}:batch_count", "--paths", "trace,export", "--threads", "1",
                        "--format", "json", "--output", out_file], capsys)
    assert code == 1 and out == ""  # TP751 is an error; the report went to the file
    doc = json.loads(out_file.read_text())
    assert doc["tool"] == "torchpact" and doc["command"] == f"export-check {TARGETS}:batch_count"
    paths = doc["summary"]["paths"]
    assert list(paths) == ["trace", "script", "export", "onnx"]
    assert paths["trace"]["status"] == "mismatch" and paths["export"]["status"] == "mismatch"
    assert paths["script"] == {**paths["script"], "status": "skipped", "reason": "not requested"}
    for p in ("trace", "export"):
        assert {"status", "reason", "max_abs_err", "max_rel_err", "variants", "latency_ms"} <= set(paths[p])
    found = {f["code"]: f for f in doc["findings"]}
    assert found["TP751"]["line"] == marker_line("BATCH_LINE") and found["TP751"]["category"] == "export"
    assert found["TP752"]["subject"] == "x.shape[0]"


def test_export_check_text_report_and_fail_on(capsys):
    code, out, _ = run(["export-check", f"{TARGETS}:training_dropout", "--paths", "trace", "--threads", "1"], capsys)
    assert code == 0  # TP702 is a warning; the default --fail-on is error
    assert "TP702 warning the model was handed over in training mode" in out
    assert "  trace   ok " in out and "  onnx    skipped   not requested" in out
    code, _, _ = run(["export-check", f"{TARGETS}:training_dropout", "--paths", "trace", "--threads", "1",
                      "--fail-on", "warning"], capsys)
    assert code == 1


def test_export_check_sarif_knows_the_runtime_codes(capsys):
    code, out, _ = run(["export-check", f"{TARGETS}:gate", "--paths", "trace", "--threads", "1",
                        "--format", "sarif"], capsys)
    assert code == 1
    doc = json.loads(out)
    rules = {r["id"]: r for r in doc["runs"][0]["tool"]["driver"]["rules"]}
    assert set(rules) == {r["ruleId"] for r in doc["runs"][0]["results"]}  # only the codes found
    assert doc["runs"][0]["results"][0]["ruleId"] == "TP701"
    from torchpact.audit.export import TRACE_BRANCH

    assert rules["TP701"]["shortDescription"]["text"] != doc["runs"][0]["results"][0]["message"]["text"]
    help_text = rules["TP701"]["help"]["markdown"]
    assert "## At runtime" in help_text and TRACE_BRANCH.summary in help_text


def test_compile_check_json_report(capsys):
    code, out, _ = run(["compile-check", f"{TARGETS}:clean", "--modes", "default", "--threads", "1",
                        "--format", "json"], capsys)
    assert code == 0  # recompilations are info
    summary = json.loads(out)["summary"]
    assert summary["graph_breaks"] == [] and summary["device"] == "cpu"
    assert list(summary["modes"]) == ["default"] and summary["modes"]["default"]["status"] == "ok"
    assert {"latency", "throughput"} <= set(summary["recommendation"])


def test_rule_pages_name_the_command(capsys):
    code, out, _ = run(["rule", "TP752"], capsys)
    assert code == 0 and "Found by: `torchpact export-check`" in out
    code, out, _ = run(["rule", "TP851"], capsys)
    assert code == 0 and "Found by: `torchpact compile-check`" in out
    code, out, _ = run(["rule", "TP701"], capsys)
    assert "## At runtime (`torchpact export-check`)" in out
