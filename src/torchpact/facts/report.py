"""Text and JSON for ``torchpact facts``: outcomes in, text out; nothing is computed here."""

from __future__ import annotations

import json
from typing import Any

from torchpact.facts import FAILED, SUPPORTED_TORCH, TIMED_OUT, Fact
from torchpact.facts.runner import Outcome


def _rules(codes: list[str]) -> str:
    return f"  [{', '.join(codes)}]" if codes else ""


def listing(facts: list[Fact], links: dict[str, list[str]]) -> str:
    """The catalogue without running it: id, expected verdict, the rules resting on each."""
    lines = []
    for f in facts:
        lines.append(f"{f.id:<52} {f.area:<11} {f.expected:<7} {f.requires:<16}{_rules(links.get(f.id, []))}".rstrip())
        lines.append(f"    {f.claim}")
    return "\n".join(lines) + "\n"


def text(outcomes: list[Outcome], links: dict[str, list[str]], torch_version: str | None, seconds: float) -> str:
    """One line per fact, grouped by area, then what changed since the supported torch."""
    lines = [f"torchpact facts on torch {torch_version or 'unknown'} (expected verdicts are torch {SUPPORTED_TORCH}'s)"]
    area = None
    for o in outcomes:
        if o.fact.area != area:
            area = o.fact.area
            lines += ["", f"== {area}"]
        mark = "!" if o.changed or o.verdict in (FAILED, TIMED_OUT) else " "
        lines.append(f"{mark} {o.verdict:<10} {o.fact.id}{_rules(links.get(o.fact.id, []))}")
        lines.append(f"             {o.fact.claim}")
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.verdict] = counts.get(o.verdict, 0) + 1
    tally = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    lines += ["", f"{len(outcomes)} facts in {seconds:.1f}s: {tally}"]
    changed = [o for o in outcomes if o.changed]
    if changed:
        lines += ["", f"Changed since torch {SUPPORTED_TORCH} (rules resting on these need review):"]
        for o in changed:
            codes = links.get(o.fact.id, [])
            lines.append(f"  {o.fact.id}: {o.fact.expected} on torch {SUPPORTED_TORCH}, {o.verdict} here; "
                         f"rules: {', '.join(codes) or 'none'}")
    broken = [o for o in outcomes if o.verdict in (FAILED, TIMED_OUT)]
    for o in broken:
        lines += ["", f"{o.fact.id} {o.verdict}:", *("  " + line for line in o.evidence.splitlines())]
    if changed or broken:
        lines += ["", "`torchpact facts ID` shows a fact's evidence and code."]
    return "\n".join(lines) + "\n"


def detail(o: Outcome, links: dict[str, list[str]]) -> str:
    """One fact: claim, verdict, the rules resting on it, evidence and the experiment's code."""
    f = o.fact
    lines = [
        f"{f.id} ({f.area})", "",
        f"Claim:    {f.claim}",
        f"Verdict:  {o.verdict} on torch {o.torch or 'unknown'} (on torch {SUPPORTED_TORCH}: {f.expected})",
        f"Requires: {f.requires}",
        f"Rules:    {', '.join(links.get(f.id, [])) or 'none rest on it'}",
        "", "Evidence:", *("  " + line for line in (o.evidence or "(none)").splitlines()),
        "", f"Experiment ({f.path}):", "", f.code().rstrip("\n"), "",
        f"Run it alone in a fresh interpreter: python -m torchpact.facts.run_one {f.id}",
    ]
    return "\n".join(lines) + "\n"


def as_json(outcomes: list[Outcome], links: dict[str, list[str]], meta: dict[str, Any]) -> str:
    facts = [{**o.as_dict(), "rules": links.get(o.fact.id, [])} for o in outcomes]
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.verdict] = counts.get(o.verdict, 0) + 1
    doc = {"tool": "torchpact", **meta, "supported_torch": SUPPORTED_TORCH, "facts": facts,
           "summary": {"facts": len(outcomes), "verdicts": counts,
                       "changed": [o.fact.id for o in outcomes if o.changed]}}
    return json.dumps(doc, indent=2) + "\n"
