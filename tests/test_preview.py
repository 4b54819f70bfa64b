"""The default rule set (lint/preview.py): error/warning findings of codes whose blind precision is not
measured above the bar are preview, reported only with --preview, preview = true, or the exact code
in select; infos are reported unless measured below their bar; bench/lint_blind/gate.py writes the
measurements."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from torchpact.cli import main
from torchpact.findings import Severity
from torchpact.lint import preview

LEAKY = Path(__file__).parent / "fixtures" / "leaky_train.py"
# TP101 at info: the model is a parameter known by its name only (the accumulated value is unresolved)
HINTED = """\
import torch
def train(model, loader, optimizer, criterion):
    score_sum = 0
    for x, y in loader:
        scores = model(x)
        criterion(scores, y).backward()
        optimizer.step()
        score_sum += scores.mean()
"""

_GATE = Path(__file__).parent.parent / "bench" / "lint_blind" / "gate.py"
_spec = importlib.util.spec_from_file_location("gate", _GATE)
gate = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = gate
_spec.loader.exec_module(gate)


def _lint(capsys, *args) -> tuple[int, dict]:
    code = main(["lint", "--no-cache", "--format", "json", *map(str, args)])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def unmeasured(monkeypatch):
    monkeypatch.setattr(preview, "_MEASURED", {})


@pytest.fixture
def leaky(tmp_path):
    target = tmp_path / "train.py"
    shutil.copy(LEAKY, target)
    return target


def test_the_package_measurements_are_what_gate_writes_from_the_committed_blind_verdicts(tmp_path):
    out = tmp_path / "precision.json"
    out.write_text(Path(preview.DATA_FILE).read_text())
    assert gate.main(["--pooled", "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == json.loads(Path(preview.DATA_FILE).read_text())


def test_pooled_rounds_add_up_each_code_and_severity():
    got = gate.pooled()
    per_round = [gate.measurements(gate.read_verdicts([str(gate.HERE / name)]), commit, date)
                 for name, commit, date in gate.POOLED.values()]
    for code, by_severity in got.items():
        for severity, m in by_severity.items():
            parts = [r[code][severity] for r in per_round if severity in r.get(code, {})]
            assert m["true"] == sum(p["true"] for p in parts) and m["judged"] == sum(p["judged"] for p in parts)
            assert m["commit"] == "+".join(p["commit"] for p in parts)
    # a rule read false in one round stays measured below its bar though a later round found it right 4/4
    tp952 = got["TP952"]["warning"]
    assert tp952["judged"] > 4 and tp952["true"] / tp952["judged"] < 0.9


def test_gate_asks_for_verdicts_or_pooled(capsys):
    with pytest.raises(SystemExit):
        gate.main([])
    with pytest.raises(SystemExit):
        gate.main(["--pooled", "x.csv", "--commit", "abc"])
    assert "give VERDICTS.csv files with --commit, or --pooled alone" in capsys.readouterr().err


def test_one_or_two_judged_findings_do_not_turn_a_severity_on(monkeypatch):
    for judged, on in ((1, False), (2, False), (3, True)):
        m = preview.Measure(true=judged, judged=judged, corpus=("a",), commit="abc1234", date="2026-12-20")
        monkeypatch.setattr(preview, "_MEASURED", {"TP101": {Severity.WARNING: m, Severity.INFO: m}})
        assert preview.is_preview("TP101", Severity.WARNING) is not on
        assert preview.is_preview("TP101", Severity.INFO) is not on


def test_an_unmeasured_finding_is_preview_at_every_severity(unmeasured):
    assert all(preview.is_preview("TP101", s) for s in (Severity.ERROR, Severity.WARNING, Severity.INFO))
    assert not preview.is_preview("TP001", Severity.ERROR) and not preview.is_preview("TP002", Severity.WARNING)
    assert preview.status("TP101", Severity.ERROR) == "preview (not measured yet)"


def test_a_default_run_hides_preview_findings_and_says_how_many(leaky, unmeasured, capsys):
    code, doc = _lint(capsys, leaky)
    assert (code, doc["findings"], doc["summary"]["preview_hidden"]) == (0, [], 1)
    assert main(["lint", "--no-cache", str(leaky)]) == 0
    assert "1 preview finding not shown" in capsys.readouterr().out


def test_preview_or_the_exact_code_shows_them_a_prefix_or_category_does_not(leaky, unmeasured, capsys):
    for args in (["--preview"], ["--select", "TP101"], ["--select", "TP101,TP2"]):
        code, doc = _lint(capsys, leaky, *args)
        assert code == 1 and [(f["code"], f["severity"], f["evidence"]) for f in doc["findings"]] == [
            ("TP101", "error", "must")], args
    for args in (["--select", "TP1"], ["--select", "memory"], ["--select", "ALL"]):
        code, doc = _lint(capsys, leaky, *args)
        assert (code, doc["findings"]) == (0, []), args


def test_preview_true_in_the_configuration(leaky, unmeasured, capsys):
    (leaky.parent / "pyproject.toml").write_text("[tool.torchpact]\npreview = true\n")
    assert _lint(capsys, leaky)[1]["summary"]["total"] == 1
    (leaky.parent / "pyproject.toml").write_text("[tool.torchpact]\npreview = 1\n")
    assert main(["lint", str(leaky)]) == 2
    assert "preview must be true or false" in capsys.readouterr().err


def test_an_unresolved_finding_is_an_info_with_its_reasons(tmp_path, unmeasured, capsys):
    (tmp_path / "train.py").write_text(HINTED)
    code, doc = _lint(capsys, tmp_path / "train.py", "--preview")
    [f] = [f for f in doc["findings"] if f["code"] == "TP101"]
    assert (code, f["severity"], f["evidence"]) == (0, "info", "unresolved")
    assert f["extra"]["evidence_reasons"] == ["`model` is taken for a module by its name"]


def test_hidden_findings_are_not_fixed(leaky, unmeasured, capsys):
    before = leaky.read_text()
    assert main(["lint", str(leaky), "--fix"]) == 0 and leaky.read_text() == before
    assert main(["lint", str(leaky), "--fix", "--preview"]) == 0 and leaky.read_text() != before


def test_a_stable_measure_puts_a_severity_on_by_default_a_poor_one_keeps_it_off(
        leaky, tmp_path, monkeypatch, capsys):
    stable = preview.Measure(true=98, judged=100, corpus=("a", "b"), commit="abc1234", date="2026-12-20")
    monkeypatch.setattr(preview, "_MEASURED", {"TP101": {Severity.ERROR: stable}})
    assert _lint(capsys, leaky)[1]["summary"]["total"] == 1
    assert preview.status("TP101", Severity.ERROR) == (
        "on by default (blind precision 98% (98/100 judged, 2 projects, at abc1234, 2026-12-20))")
    (tmp_path / "hinted.py").write_text(HINTED)
    poor = preview.Measure(true=7, judged=10, corpus=("a",), commit="abc1234", date="2026-12-20")
    good = preview.Measure(true=9, judged=10, corpus=("a",), commit="abc1234", date="2026-12-20")
    monkeypatch.setattr(preview, "_MEASURED", {"TP101": {Severity.INFO: poor}})
    assert [f for f in _lint(capsys, tmp_path / "hinted.py")[1]["findings"] if f["code"] == "TP101"] == []
    monkeypatch.setattr(preview, "_MEASURED", {"TP101": {Severity.INFO: good}})
    assert [f["severity"] for f in _lint(capsys, tmp_path / "hinted.py")[1]["findings"] if f["code"] == "TP101"] == [
        "info"]


def test_gate_writes_the_measurements_from_verdicts(tmp_path, capsys):
    verdicts = tmp_path / "round.csv"
    verdicts.write_text("project,path,line,code,severity,verdict,reason\n"
                        "alpha,a.py,3,TP101,error,true,leaks\n"
                        "alpha,a.py,9,TP101,error,debatable,bounded by the caller\n"
                        "beta,b.py,1,TP101,warning,true,\n"
                        "beta,b.py,2,TP416,info,false,a property\n")
    out = tmp_path / "precision.json"
    out.write_text(json.dumps({"about": "kept", "measured": {"TP999": {"error": {"true": 1, "judged": 1}}}}))
    assert gate.main([str(verdicts), "--commit", "abc1234", "--date", "2026-12-20", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["about"] == "kept" and set(data["measured"]) == {"TP101", "TP416"}
    assert data["measured"]["TP101"]["error"] == {"true": 1, "judged": 2, "corpus": ["alpha", "beta"],
                                                  "commit": "abc1234", "date": "2026-12-20"}
    measured = preview.parse(data)
    assert measured["TP101"][Severity.ERROR].precision == 0.5 and measured["TP101"][Severity.WARNING].precision == 1
    printed = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert ["TP101", "error", "1/2", "50%", "preview"] in printed
    assert gate.main([str(verdicts), "--commit", "abc1234", "--out", str(out), "--merge",
                      "--projects", "alpha,beta,gamma"]) == 0
    assert json.loads(out.read_text())["measured"]["TP101"]["error"]["corpus"] == ["alpha", "beta", "gamma"]


def test_gate_refuses_a_bad_verdict_in_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("project,path,line,code,severity,verdict,reason\nalpha,a.py,3,TP101,error,maybe,\n")
    assert gate.main([str(bad), "--commit", "x", "--out", str(tmp_path / "p.json")]) == 2
    assert capsys.readouterr().err.strip() == ("gate.py: error: "
                                               f"{bad}:2: verdict 'maybe' is not true, false or debatable")
