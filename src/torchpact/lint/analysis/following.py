"""A bound on the analyses that follow definitions: each recursion from a value to the definitions it
was built from passes through a function marked ``@follows_definitions(answer)``.

Definitions can form cycles that no single flow-sensitive step sees: ``new = self.data[idx]`` then
``self.data = new`` (attributes are flow-insensitive, so each refers to the other), a method that
stores its argument back on ``self``, a loop that rebinds a name from itself. Generated code can also
hold chains of thousands of distinct definitions (``a2 = a1 + 1``, ``a3 = a2 + 1``...). Each marked
function therefore answers ``answer`` (what it says where it stops following: the answer of its own
depth cutoff where it has one, else "cannot tell") when it is asked the question it is already
answering further up the stack (same function, same arguments: the answer would only restate itself),
or when marked functions are already nested ``LIMIT`` deep, all analyses together. ``kinds.kinds_of``
keeps its own memo and active set for the same reasons.

``tests/lint/test_following.py`` checks that every recursion in lint that reads definitions passes
through a marked function.
"""

from __future__ import annotations

import ast
import functools
import threading
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

# Marked calls nested at most this deep (a few Python frames each: far below the interpreter's limit).
LIMIT = 48


class _Stack(threading.local):
    def __init__(self) -> None:
        self.active: set[tuple[object, ...]] = set()
        self.depth = 0


_STACK = _Stack()


def _identity(arg: object) -> object:
    if isinstance(arg, ast.AST) or not getattr(type(arg), "__hash__", None):
        return id(arg)  # nodes by identity (alive while the call runs); lists and dicts too
    return arg


def follows_definitions(answer: object) -> Callable[[F], F]:
    """Mark a function that recurses through definitions: on a question already being answered up
    the stack, or past ``LIMIT`` nested marked calls, it returns ``answer`` instead of recursing."""

    def mark(fn: F) -> F:
        @functools.wraps(fn)
        def bounded(*args: object, **kwargs: object) -> object:
            stack = _STACK
            key = (fn, *map(_identity, args), *((k, _identity(v)) for k, v in sorted(kwargs.items())))
            if key in stack.active or stack.depth >= LIMIT:
                return answer
            stack.active.add(key)
            stack.depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                stack.depth -= 1
                stack.active.discard(key)

        bounded.follows_definitions = True  # type: ignore[attr-defined]  # read by the structural test
        return bounded  # type: ignore[return-value]

    return mark
