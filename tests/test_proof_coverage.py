"""Every rule whose consequence can run on CPU has a proof in tests/proofs (marked ``proves``)."""

from __future__ import annotations

import ast
from pathlib import Path

from torchpact.lint.registry import all_rules

PROOFS = Path(__file__).parent / "proofs"


def proven_codes() -> set[str]:
    codes: set[str] = set()
    for path in PROOFS.glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "proves"):
                codes.update(a.value for a in node.args if isinstance(a, ast.Constant))
    return codes


def test_every_rule_has_a_proof_or_says_why_not():
    proven = proven_codes()
    missing = [r.code for r in all_rules() if r.code not in proven and not getattr(r, "proof", None)]
    assert missing == [], f"rules without a proof in tests/proofs: {missing}"
