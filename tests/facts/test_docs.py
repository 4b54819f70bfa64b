"""docs/facts.md is generated from a run of the catalogue; it must not be stale."""

from __future__ import annotations

from pathlib import Path

from torchpact.facts import SUPPORTED_TORCH, all_facts
from torchpact.facts.docs import expected_verdict_here, parse, rerender

PAGE = Path(__file__).resolve().parents[2] / "docs" / "facts.md"
REGENERATE = "run `python -m torchpact.facts.docs docs/facts.md`"


def test_docs_facts_md_is_up_to_date():
    text = PAGE.read_text(encoding="utf-8")
    torch_version, recorded = parse(text)
    assert torch_version is not None and torch_version.startswith(SUPPORTED_TORCH + "."), (
        f"docs/facts.md was not generated on torch {SUPPORTED_TORCH}; {REGENERATE}")
    # Claims, rule links and code as the catalogue has them now; evidence as the page records it.
    assert rerender(text) == text, f"docs/facts.md is stale; {REGENERATE}"
    wrong = {f.id: recorded[f.id][0] for f in all_facts() if not expected_verdict_here(f, recorded[f.id][0])}
    assert wrong == {}, f"verdicts on the page differ from the expected ones; {REGENERATE}"
