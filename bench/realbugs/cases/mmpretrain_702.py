"""open-mmlab/mmpretrain#702: `frozen_stages` has no effect when fine-tuning VGG.

Original: VGG applies `frozen_stages` in `_freeze_stages()`, called from its `train()` override only
(not from `__init__`, unlike ResNet); nothing calls `model.train()` before training, so the "frozen"
stages train. Here: a small VGG with the same `train()` override on random 32x32 images. `fixed`
calls `model.train()` before the loop.
"""

import sys

import torch
import torch.nn as nn

FIXED = sys.argv[1:] == ["fixed"]
torch.manual_seed(0)


class VGG(nn.Module):
    def __init__(self, frozen_stages=2, num_classes=10):
        super().__init__()
        self.frozen_stages = frozen_stages
        chans = [3, 8, 16, 32]
        self.features = nn.ModuleList(
            nn.Sequential(nn.Conv2d(chans[i], chans[i + 1], 3, padding=1), nn.BatchNorm2d(chans[i + 1]),
                          nn.ReLU(), nn.MaxPool2d(2)) for i in range(3))
        self.head = nn.Linear(32 * 4 * 4, num_classes)

    def _freeze_stages(self):
        for i in range(self.frozen_stages):
            stage = self.features[i]
            stage.eval()
            for param in stage.parameters():
                param.requires_grad = False

    def train(self, mode=True):
        super().train(mode)
        self._freeze_stages()
        return self

    def forward(self, x):
        for stage in self.features:
            x = stage(x)
        return self.head(x.flatten(1))


model = VGG()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
if FIXED:
    model.train()
for step in range(10):
    img, label = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(img), label)
    loss.backward()
    optimizer.step()
