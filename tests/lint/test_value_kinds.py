"""ValueKinds alone: the evidence a check relies on, memoised facts that keep weakening later hits,
and questions whose notes are dropped."""

from __future__ import annotations

from torchpact.findings import Evidence
from torchpact.lint.analysis.value_kinds import ValueKinds
from torchpact.lint.kinds import MAY, MUST


def test_note_weakens_the_current_check():
    kinds = ValueKinds({})
    kinds.note(Evidence.MAY, "the callee is defined elsewhere")
    assert kinds.recorder.level == MAY and kinds.recorder.reasons == ["the callee is defined elsewhere"]


def test_a_remembered_fact_notes_its_evidence_on_every_use_and_is_computed_once():
    memo: dict[object, object] = {}
    kinds = ValueKinds(memo)
    calls = []

    def compute() -> str:
        calls.append(1)
        kinds.note(Evidence.MAY, "why")
        return "fact"

    assert kinds.remember("k", compute) == "fact"
    kinds.recorder.reset()
    assert kinds.remember("k", compute) == "fact" and calls == [1] and "k" in memo
    assert kinds.recorder.level == MAY and kinds.recorder.reasons == ["why"]


def test_unnoted_drops_the_reasons_noted_inside():
    kinds = ValueKinds({})

    def compute() -> int:
        kinds.note(Evidence.MAY, "not this")
        return 1

    assert kinds.unnoted(compute) == 1
    assert kinds.recorder.reasons == [] and kinds.recorder.level == MUST


def test_a_kind_is_its_string_in_sets_dicts_and_text():
    from torchpact.lint.kind_tables import LOSS, PHRASE, Kind

    assert LOSS is Kind.LOSS and LOSS == "loss" and "loss" in frozenset({LOSS}) and hash(LOSS) == hash("loss")
    assert f"{LOSS}" == str(LOSS) == "loss" and PHRASE["loss"] == "a loss"
