"""torch.onnx.export (torch 2.13's default exporter, which runs torch.export first) run in onnxruntime."""

from __future__ import annotations

import importlib.util
from typing import Any

from torchpact.audit.export.inputs import exportable
from torchpact.audit.export.path import Context, Runner
from torchpact.audit.export.results import PathResult
from torchpact.audit.variants import Dims, Variant
from torchpact.findings import Finding

ONNX_HINT = "pip install 'torchpact[export]' (onnx, onnxscript, onnxruntime)"


class OnnxPath:
    name, label = "onnx", "torch.onnx.export"

    def unavailable(self) -> str | None:
        missing = onnx_missing()
        return f"{', '.join(missing)} not installed: {ONNX_HINT}" if missing else None

    def build(self, model: Any, example: Variant, dims: Dims, result: PathResult) -> Runner:
        import torch

        module, args, dynamic_shapes, _ = exportable(model, example, dims)
        program = torch.onnx.export(module, args, dynamic_shapes=dynamic_shapes, verbose=False)
        program.initialize_inference_session(_ort_session)
        inputs = len(program.model.graph.inputs)

        def run(v: Variant) -> Any:
            # the ONNX graph takes the tensor inputs only (constants are folded in), in flattened order;
            # onnxruntime rejects inputs the graph does not declare, where ONNXProgram's zip would drop them
            tensors = v.tensors()
            if len(tensors) != inputs:
                raise ValueError(f"the ONNX model declares {inputs} inputs and was fed {len(tensors)}")
            return program(*tensors)

        return run

    def findings(self, context: Context) -> tuple[list[Finding], set[str]]:
        return [], set()


def onnx_missing() -> list[str]:
    return [m for m in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(m) is None]


def _ort_session(model: Any) -> Any:
    import onnxruntime as ort
    import torch

    ort.set_default_logger_severity(4)  # errors reach the report through the exception
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.log_severity_level = 4  # onnxruntime would print each failed run on stderr; the report says it
    # ORT's idle workers spin by default and would steal the cores eager is timed on afterwards
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
