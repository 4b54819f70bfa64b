"""torch.jit.script: compiles ``forward`` and everything it calls from their Python source."""

from __future__ import annotations

from typing import Any

from torchpact.audit.export.path import Context, Runner
from torchpact.audit.export.results import PathResult
from torchpact.audit.variants import Dims, Variant
from torchpact.findings import Finding


class ScriptPath:
    name, label = "script", "torch.jit.script"

    def unavailable(self) -> str | None:
        return None

    def build(self, model: Any, example: Variant, dims: Dims, result: PathResult) -> Runner:
        import torch

        scripted = torch.jit.script(model)
        return lambda v: scripted(*v.args, **v.kwargs)

    def findings(self, context: Context) -> tuple[list[Finding], set[str]]:
        return [], set()
