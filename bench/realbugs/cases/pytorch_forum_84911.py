"""PyTorch forum 84911 ("abnormal changes in loss and accuracy"): transfer learning that never learns.

Original: EfficientNet-b0 on CIFAR-100 gets a new `_fc` head, then every parameter whose name lacks
"bn" is frozen — and the new head as well; the optimizer holds only the head. Here: a small conv net
stands in for EfficientNet, random images for CIFAR-100. `fixed` freezes the backbone only and trains
the head.
"""

import sys

import torch
import torch.nn as nn

FIXED = sys.argv[1:] == ["fixed"]
torch.manual_seed(0)


class TinyEfficientNet(nn.Module):
    def __init__(self):
        super().__init__()
        self._conv_stem = nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False)
        self._bn0 = nn.BatchNorm2d(16)
        self._conv_head = nn.Conv2d(16, 32, 3, padding=1, bias=False)
        self._bn1 = nn.BatchNorm2d(32)
        self._dropout = nn.Dropout(0.2)
        self._fc = nn.Linear(32, 1000)

    def forward(self, x):
        x = torch.relu(self._bn0(self._conv_stem(x)))
        x = torch.relu(self._bn1(self._conv_head(x)))
        x = x.mean((2, 3))
        return self._fc(self._dropout(x))


model_transfer = TinyEfficientNet()  # "pretrained"
n_inputs = model_transfer._fc.in_features
model_transfer._fc = nn.Linear(n_inputs, 100)
for name, param in model_transfer.named_parameters():
    if "bn" not in name and not (FIXED and name.startswith("_fc")):
        param.requires_grad = False
if not FIXED:
    for param in model_transfer._fc.parameters():
        param.requires_grad = False
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam([p for p in model_transfer.parameters() if p.requires_grad] if FIXED
                             else model_transfer._fc.parameters(), lr=0.001)

for step in range(30):
    data, target = torch.randn(16, 3, 32, 32), torch.randint(0, 100, (16,))
    optimizer.zero_grad()
    loss = criterion(model_transfer(data), target)
    loss.backward()
    optimizer.step()
