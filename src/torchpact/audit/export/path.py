"""The one protocol every export path follows, and what a path's findings may look at.

A path (``trace``, ``script``, ``export``, ``onnx``) builds its artifact from the example and returns
a :data:`Runner` that feeds a variant to it; the common machinery (:mod:`.run`) runs that on every
variant and compares with eager. A path may add findings of its own from the results of all paths.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from torchpact.audit.export.results import PathResult
from torchpact.audit.variants import Dims, Variant
from torchpact.findings import Finding

Runner = Callable[[Variant], Any]


@dataclass
class Context:
    """What a path's findings may look at: the model, its ``forward`` line, and every path's result."""

    model: Any
    location: tuple[str | None, int | None]
    results: dict[str, PathResult] = field(default_factory=dict)


class ExportPath(Protocol):
    name: str  # the key in summary.paths and in --paths
    label: str  # how the findings name it (the torch function)

    def unavailable(self) -> str | None:
        """Why the path cannot run on this installation (a missing package), or None."""

    def build(self, model: Any, example: Variant, dims: Dims, result: PathResult) -> Runner:
        """The artifact built from ``example``; may record details in ``result.detail``."""

    def findings(self, context: Context) -> tuple[list[Finding], set[str]]:
        """This path's own findings, and the paths whose failures they explain."""
