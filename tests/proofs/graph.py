"""Small helpers the proofs use to look at autograd graphs."""

from __future__ import annotations


def graph_size(tensor) -> int:
    """Number of distinct autograd nodes reachable from ``tensor.grad_fn``."""
    seen = set()
    stack = [tensor.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        stack.extend(nxt for nxt, _ in fn.next_functions)
    return len(seen)
