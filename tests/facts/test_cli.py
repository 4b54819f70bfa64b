"""`torchpact facts` end to end, and the facts a rule's page shows."""

from __future__ import annotations

import json

import pytest

from torchpact.cli import main
from torchpact.facts import fact_by_id, report
from torchpact.facts.runner import Outcome


def run_cli(args, capsys):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_shows_claims_and_the_rules_resting_on_them_without_running_anything(capsys):
    code, out, _ = run_cli(["facts", "--list"], capsys)
    assert code == 0
    line = next(line for line in out.splitlines()
                if line.startswith("dtype-conversion-after-ddp-wrap-stops-all-reduce"))
    assert "distributed" in line and "[TP601]" in line
    assert fact_by_id("dtype-conversion-after-ddp-wrap-stops-all-reduce").claim in out

    code, out, _ = run_cli(["facts", "--list", "--json", "--area", "security"], capsys)
    assert code == 0
    [entry] = json.loads(out)
    assert entry["id"] == "load-defaults-to-weights-only" and entry["rules"] == ["TP951", "TP952"]


@pytest.mark.parametrize("args, message", [
    (["facts", "no-such-fact"], "no fact no-such-fact"),
    (["facts", "--area", "nowhere"], "no fact in area nowhere"),
    (["facts", "--jobs", "0"], "must be positive"),
])
def test_usage_errors_exit_2(args, message, capsys):
    code, _, err = run_cli(args, capsys)
    assert code == 2 and message in err


def test_one_fact_shows_claim_verdict_rules_evidence_and_code(capsys):
    code, out, _ = run_cli(["facts", "graph-kept-by-accumulator"], capsys)
    assert code == 0
    fact = fact_by_id("graph-kept-by-accumulator")
    assert f"Claim:    {fact.claim}" in out
    assert "Verdict:  true on torch 2.13" in out
    assert "Rules:    TP101" in out
    assert "autograd nodes reachable from total after each iteration: [7, 12, 17, 22, 27]" in out
    assert fact.code() in out
    assert "python -m torchpact.facts.run_one graph-kept-by-accumulator" in out

    code, out, _ = run_cli(["facts", "graph-kept-by-accumulator", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["command"] == "facts graph-kept-by-accumulator"
    [entry] = doc["facts"]
    assert entry["verdict"] == entry["expected"] == "true" and not entry["changed"]
    assert entry["rules"] == ["TP101"] and doc["summary"]["changed"] == []


def test_a_changed_verdict_lists_the_rules_that_rest_on_it_and_exits_1(capsys, monkeypatch):
    fact = fact_by_id("dtype-conversion-after-ddp-wrap-stops-all-reduce")

    def future_torch(facts, **kwargs):  # what a torch that fixed the pitfall would report
        return [Outcome(f, "false", "grads in sync: [True, True]", 1.0, "9.9.0") for f in facts]

    monkeypatch.setattr("torchpact.facts.runner.run_facts", future_torch)
    code, out, _ = run_cli(["facts", "--area", "distributed"], capsys)
    assert code == 1
    assert "Changed since torch 2.13 (rules resting on these need review):" in out
    assert (f"  {fact.id}: true on torch 2.13, false here; rules: TP601") in out


def test_failures_are_listed_with_their_evidence():
    fact = fact_by_id("detach-shares-storage")
    text = report.text([Outcome(fact, "timed out", "no verdict within 60 s", 60.0)], {}, "2.13.0", 61.0)
    assert "! timed out  detach-shares-storage" in text
    assert "detach-shares-storage timed out:\n  no verdict within 60 s" in text


def test_a_rule_page_shows_the_claims_it_rests_on(capsys):
    code, out, _ = run_cli(["rule", "TP201"], capsys)
    assert code == 0
    assert f"- `data-write-changes-backward`: {fact_by_id('data-write-changes-backward').claim}" in out
