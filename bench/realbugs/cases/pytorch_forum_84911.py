"""PyTorch forum 84911 ("abnormal changes in loss and accuracy"): transfer learning that never learns.

Original: a pretrained EfficientNet-b0 gets a new classification head for CIFAR-100; then every
parameter whose name lacks "bn" is frozen, and the new head's parameters as well, while the
optimizer holds only the head. Only the BatchNorm layers still change (their running statistics and
affine parameters, which no optimizer steps). Here: a small conv net of our own whose BatchNorm
layers are named with "bn", as the freezing rule needs, and random images. `fixed` freezes the
backbone only and trains the head.
"""

import sys

import torch
from torch import nn

FIXED = sys.argv[1:] == ["fixed"]
torch.manual_seed(0)


class SmallBackbone(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False)
        self.stem_bn = nn.BatchNorm2d(16)
        self.mixer = nn.Conv2d(16, 32, 3, padding=1, bias=False)
        self.mixer_bn = nn.BatchNorm2d(32)
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        x = torch.relu(self.stem_bn(self.stem(x)))
        x = torch.relu(self.mixer_bn(self.mixer(x)))
        return self.head(x.mean((2, 3)))


net = SmallBackbone()  # stands for the pretrained network
net.head = nn.Linear(net.head.in_features, 100)  # the new head for 100 classes
for name, param in net.named_parameters():
    if "bn" not in name and not (FIXED and name.startswith("head.")):
        param.requires_grad = False
if not FIXED:
    for param in net.head.parameters():
        param.requires_grad = False  # the bug: the new head is frozen too
trainable = [p for p in net.parameters() if p.requires_grad] if FIXED else net.head.parameters()
optimizer = torch.optim.Adam(trainable, lr=1e-3)
loss_fn = nn.CrossEntropyLoss()
for _step in range(30):
    images, labels = torch.randn(16, 3, 32, 32), torch.randint(0, 100, (16,))
    optimizer.zero_grad()
    loss = loss_fn(net(images), labels)
    loss.backward()
    optimizer.step()
