CLAIM = "`torch.onnx.export` of a `torch.jit.ScriptModule` works with the defaults of torch 2.13."
EXPECTED = "false"
TIMEOUT_S = 90


def run() -> str:
    import inspect
    import os
    import tempfile

    import torch

    default = inspect.signature(torch.onnx.export).parameters["dynamo"].default
    print(f"torch.onnx.export default: dynamo={default}")
    scripted = torch.jit.script(torch.nn.Linear(4, 2).eval())
    with tempfile.TemporaryDirectory() as tmp:
        try:
            torch.onnx.export(scripted, (torch.randn(1, 4),), os.path.join(tmp, "s.onnx"), verbose=False)
            print("torch.onnx.export(scripted, ...): exported")
            default_works = True
        except Exception as exc:  # noqa: BLE001 - TorchExportError is private
            reason = "Exporting a ScriptModule is not supported" in str(exc)
            print(f"torch.onnx.export(scripted, ...): {type(exc).__name__}, "
                  f"'Exporting a ScriptModule is not supported' in the message: {reason}")
            default_works = False
        try:
            torch.onnx.export(scripted, (torch.randn(1, 4),), os.path.join(tmp, "l.onnx"), dynamo=False)
            print("with dynamo=False (the TorchScript-based exporter): "
                  f"exported: {os.path.exists(os.path.join(tmp, 'l.onnx'))}")
        except Exception as exc:  # noqa: BLE001
            print(f"with dynamo=False: {type(exc).__name__}")
    return "true" if default_works else "false"
