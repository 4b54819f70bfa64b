"""TorchScript, torch.export and ONNX export."""
