"""Budget alone: no budget never stops; a spent one raises on a later tick."""

from __future__ import annotations

import time

import pytest

from torchpact.lint.analysis.budget import Budget, BudgetExceeded


def test_without_a_budget_ticks_never_stop():
    budget = Budget()
    for _ in range(1000):
        budget.tick()
    assert not budget.out_of_time()


def test_a_spent_budget_raises_within_64_ticks():
    budget = Budget()
    budget.start(-1.0)  # already past: what the clocks say, without waiting on them
    assert budget.deadline is not None and budget.deadline < time.process_time()
    with pytest.raises(BudgetExceeded):
        for _ in range(64):
            budget.tick()
