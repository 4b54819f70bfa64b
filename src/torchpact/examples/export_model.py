"""Exports a gated MLP to TorchScript (trace) and ONNX."""

import torch
import torch.nn as nn


class GatedMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(16, 64)
        self.down = nn.Linear(64, 16)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        h = self.up(x)
        if h.mean() > 0:  # data-dependent branch: trace keeps only the example's side
            h = torch.relu(h)
        steps = int(x.shape[0])
        return self.down(self.drop(h)) * steps


model = GatedMLP()
example = torch.randn(4, 16)
traced = torch.jit.trace(model, example)  # no model.eval(): dropout is baked in
torch.onnx.export(model, (example,), "gated.onnx")
scripted = torch.jit.script(model)
torch.onnx.export(scripted, (example,), "gated_scripted.onnx")
for size in (1, 8, 32):
    fast = torch.compile(model)
    fast(torch.randn(size, 16))
