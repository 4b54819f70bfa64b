"""export-check: every way to ship a model, each compared with eager on varied inputs.

One module per path behind one protocol (:mod:`.path`): :mod:`.trace`, :mod:`.script`,
:mod:`.torch_export`, :mod:`.onnx`; what they share: :mod:`.inputs` (how an artifact takes the
inputs), :mod:`.run` (build, run on the variants, time), :mod:`.findings` (findings about the paths
together), :mod:`.training` (TP702); the codes in :mod:`.checks`, the plain data in :mod:`.results`,
and the command itself in :mod:`.check`.
"""

from torchpact.audit.eager import eager_inputs
from torchpact.audit.export.check import PATHS, export_check
from torchpact.audit.export.checks import (
    CHECKS,
    EXPORT_SPECIALISED,
    JIT_DEPRECATED,
    ONNX_NUMERICS,
    OUTPUT_TYPE,
    PATH_DIFFERS,
    PATH_FAILED,
    TRACE_BRANCH,
    TRACE_SHAPE,
    TRAINING_MODE,
)
from torchpact.audit.export.onnx import ONNX_HINT, onnx_missing
from torchpact.audit.export.results import FAILED, MISMATCH, OK, SKIPPED, ExportReport, PathResult, VariantResult
from torchpact.checks import Check

__all__ = ["CHECKS", "Check", "EXPORT_SPECIALISED", "ExportReport", "FAILED", "JIT_DEPRECATED", "MISMATCH",
           "ONNX_HINT", "ONNX_NUMERICS", "OK", "OUTPUT_TYPE", "PATHS", "PATH_DIFFERS", "PATH_FAILED", "PathResult",
           "SKIPPED", "TRACE_BRANCH", "TRACE_SHAPE", "TRAINING_MODE", "VariantResult", "eager_inputs",
           "export_check", "onnx_missing"]
