"""docs/rules/ is generated from the rules; it must not be stale."""

from __future__ import annotations

from pathlib import Path

from torchpact.docs import generated_files

DOCS = Path(__file__).resolve().parents[1] / "docs" / "rules"


def test_docs_rules_are_up_to_date():
    wanted = generated_files()
    present = {p.name: p.read_text(encoding="utf-8") for p in DOCS.glob("*.md")}
    stale = sorted(n for n in wanted if present.get(n) != wanted[n])
    extra = sorted(set(present) - set(wanted))
    assert not stale and not extra, (
        f"docs/rules is stale (changed: {stale}, unexpected: {extra}); run `make docs`")
