"""open-mmlab/mmpretrain#702: `frozen_stages` has no effect when fine-tuning VGG.

Original: VGG freezes its first `frozen_stages` stages only inside its `train()` override (ResNet
also does it in `__init__`); nothing calls `model.train()` before training, so the "frozen" stages
train. Here: a staged conv net of our own with the same arrangement (freezing done only when
`train()` is called) on random 32x32 images. `fixed` calls `model.train()` before the loop.
"""

import sys

import torch
from torch import nn

FIXED = sys.argv[1:] == ["fixed"]
torch.manual_seed(0)


class StagedConvNet(nn.Module):
    def __init__(self, frozen_stages=2, classes=10):
        super().__init__()
        self.frozen_stages = frozen_stages
        widths = (3, 8, 16, 32)
        self.stages = nn.ModuleList(
            nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU(), nn.MaxPool2d(2))
            for c_in, c_out in zip(widths, widths[1:], strict=False))
        self.classifier = nn.Linear(32 * 4 * 4, classes)

    def train(self, mode=True):
        super().train(mode)
        for stage in self.stages[:self.frozen_stages]:  # frozen here only, never in __init__
            stage.eval()
            stage.requires_grad_(False)
        return self

    def forward(self, x):
        for stage in self.stages:
            x = stage(x)
        return self.classifier(x.flatten(1))


model = StagedConvNet()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
if FIXED:
    model.train()
for _step in range(10):
    images, labels = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
