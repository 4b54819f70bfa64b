"""``statistics.median`` without importing ``statistics`` (with decimal and fractions, ~5 ms at every
``torchpact run`` start, for a few medians of step times and latencies)."""

from __future__ import annotations

from typing import Iterable


def median(values: Iterable[float]) -> float:
    """The middle value (the mean of the two middle ones for an even count); ValueError when empty."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no median of no values")
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
