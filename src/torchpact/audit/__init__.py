"""export-check and compile-check: does the model behave the same after trace / script / torch.export /
ONNX / torch.compile, on inputs other than the example?

``target`` loads ``FILE.py:FUNC``; ``variants`` makes the inputs; ``timing`` measures latency the
one way both commands use; ``export`` and ``compile`` compute plain data and Findings. torch is
imported lazily.
"""

from __future__ import annotations

from typing import Any


def all_checks() -> dict[str, Any]:
    """The runtime checks of export-check and compile-check, by code."""
    from torchpact.audit import compile as compile_mod
    from torchpact.audit import export as export_mod

    return {c.code: c for c in (*export_mod.CHECKS, *compile_mod.CHECKS)}
