"""TorchFix parity: for every TorchFix rule true on torch 2.13, TorchFix's own checker and torchpact
flag the same line of the same trigger (the cases live in bench/torchfix_parity.py, which also
prints the parity count)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("torchfix")

_spec = importlib.util.spec_from_file_location(
    "torchfix_parity", Path(__file__).parent.parent / "bench" / "torchfix_parity.py")
parity = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = parity  # dataclasses look their module up there
_spec.loader.exec_module(parity)


@pytest.mark.parametrize("case", parity.CASES, ids=lambda c: f"{c.torchfix}-{c.torchpact}-{c.text.split()[-1][:20]}")
def test_torchpact_flags_the_line_torchfix_flags(case):
    theirs, ours = parity.check(case)
    assert theirs, f"the trigger no longer triggers TorchFix {case.torchfix}"
    assert theirs <= ours, (case.torchfix, case.torchpact, theirs, ours)


def test_every_torchfix_rule_is_covered_or_explained():
    covered = {c.torchfix for c in parity.CASES}
    assert set(parity.all_torchfix_codes()) == covered | set(parity.NOT_COVERED)
    assert not covered & set(parity.NOT_COVERED)


def test_every_deprecated_symbol_of_torchfix_is_called_by_a_case():
    symbols = parity.deprecated_symbols()
    assert "torch.solve" in symbols and symbols["torch.solve"] == "TOR001"
    assert symbols["functorch.hessian"] == "TOR101"
    assert parity.symbols_without_a_call(parity.CASES, symbols) == []
