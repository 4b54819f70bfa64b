"""The warnings a call emits, for proofs about deprecated and misused torch APIs."""

from __future__ import annotations

import warnings


def warned(fn, category=Warning):
    """Run ``fn``; return (its result, the text of every warning of ``category`` it emitted)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    return out, " ".join(str(w.message) for w in caught if issubclass(w.category, category))
