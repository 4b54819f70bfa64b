"""The CPU time a rule may spend on one file: past it, its analysis raises ``BudgetExceeded``."""

from __future__ import annotations

import time


class BudgetExceeded(Exception):
    """A rule's analysis of one file ran past its time budget."""


class Budget:
    """The current rule's CPU budget on one file (set by the engine before each rule)."""

    def __init__(self) -> None:
        # past it, the analysis raises BudgetExceeded; None: no budget
        self.deadline: float | None = None
        self._wall_check = 0.0
        self._ticks = 0

    def tick(self) -> None:
        """Raise BudgetExceeded once the current rule is past its time on this file."""
        self._ticks += 1
        if not self._ticks & 63 and self.out_of_time():
            raise BudgetExceeded

    def start(self, seconds: float) -> None:
        """Give the next rule ``seconds`` of CPU time on this file."""
        self.deadline = time.process_time() + seconds
        self._wall_check = time.perf_counter() + seconds

    def out_of_time(self) -> bool:
        """Past the CPU budget. The CPU clock is a system call, so it is read only once the cheap wall
        clock has passed the budget (CPU time never runs ahead of wall time in one thread)."""
        if self.deadline is None or time.perf_counter() < self._wall_check:
            return False
        left = self.deadline - time.process_time()
        self._wall_check = time.perf_counter() + max(left, 0.01)
        return left < 0
