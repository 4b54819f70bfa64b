"""The ``Finding`` record every reporter shares: equality, immutability, copies and the JSON contract."""

from __future__ import annotations

import copy
import pickle

import pytest

from torchpact.findings import Category, Finding, Severity


def _finding(**extra) -> Finding:
    return Finding("TP101", Category.MEMORY, Severity.ERROR, "a graph is kept alive", path="train.py", line=14,
                   step=3, extra=extra)


def test_findings_are_equal_and_hash_alike_whatever_their_extra_facts():
    a, b = _finding(series=[1, 2]), _finding()
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != a.replace(line=15) and a != a.with_severity(Severity.INFO)
    assert b.extra == {} and b.extra is not _finding().extra  # a fresh dict each


def test_a_finding_cannot_be_changed_only_copied_with_changes():
    f = _finding()
    with pytest.raises(AttributeError, match="replace"):
        f.line = 15  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del f.path
    moved = f.replace(path="other.py", line=2)
    assert (moved.path, moved.line, moved.code, f.path, f.line) == ("other.py", 2, "TP101", "train.py", 14)
    with pytest.raises(TypeError):
        f.replace(no_such_field=1)


def test_a_finding_survives_pickle_copy_and_its_json_form():
    f = _finding(series=[1.5])
    for same in (pickle.loads(pickle.dumps(f)), copy.deepcopy(f), copy.copy(f), Finding.from_dict(f.to_dict())):
        assert same == f and same.extra == {"series": [1.5]}
    data = f.to_dict()
    assert list(data)[:4] == ["code", "category", "severity", "message"] and list(data)[-1] == "extra"
    assert (data["category"], data["severity"]) == ("memory", "error")
    assert "extra" not in _finding().to_dict()
    assert Finding.from_dict({**data, "new_key": 7}).extra == {"series": [1.5], "new_key": 7}
    assert "line=14" in repr(f)


def test_evidence_is_part_of_the_finding_and_its_json_form():
    from torchpact.findings import Evidence, severity_cap

    f = _finding().replace(evidence=Evidence.MAY)
    assert f.to_dict()["evidence"] == "may" and Finding.from_dict(f.to_dict()) == f
    assert f != f.replace(evidence=Evidence.MUST)
    assert _finding().to_dict()["evidence"] is None and Finding.from_dict(_finding().to_dict()).evidence is None
    assert [severity_cap(e) for e in (Evidence.MUST, Evidence.MAY, Evidence.UNRESOLVED)] == [
        Severity.ERROR, Severity.WARNING, Severity.INFO]


def test_a_runtime_check_states_what_its_findings_rest_on():
    from torchpact.checks import Check
    from torchpact.findings import Evidence
    from torchpact.watch.watchers.chance_loss import CHANCE_LOSS
    from torchpact.watch.watchers.nonfinite import FORWARD

    assert Check("TP999", Category.MEMORY, Severity.INFO, "s", "d").evidence == Evidence.OBSERVED
    assert CHANCE_LOSS.evidence == Evidence.INFERRED  # a heuristic: the loss near ln(C)
    assert FORWARD.evidence == Evidence.OBSERVED
