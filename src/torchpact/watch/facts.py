"""Facts one watcher establishes and another's verdict depends on, typed, held by the session.

A watcher publishes a fact (``session.facts.publish(...)``) where it finds it; another reads the facts of a
kind (``session.facts.of(Kind)``) instead of searching the findings for a code and an ``extra`` key.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class GradientsNotReduced:
    """DDP did not all-reduce some gradients of ``ddp`` (parameters that got none: ``ddp_unused``'s TP604), so
    its replicas may differ for that reason alone."""

    ddp: weakref.ref


class Facts:
    """The facts a session's watchers published, by kind."""

    def __init__(self) -> None:
        self._held: dict[type, list[Any]] = {}

    def publish(self, fact: object) -> None:
        self._held.setdefault(type(fact), []).append(fact)

    def of(self, kind: type[T]) -> list[T]:
        return list(self._held.get(kind, ()))
