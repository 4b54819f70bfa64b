"""Stack Overflow 60335387 ("PyTorch MNIST example not converge"): `optimizer.zero_grad()` is missing.

Original: an MNIST training loop with Adam at lr=1e-4 that never clears the gradients; the loss gets
worse as every step applies the sum of all gradients so far. Here: a small digit classifier of our
own on random 28x28 images, the same loop shape. `fixed` clears the gradients each step.
"""

import sys

import torch
import torch.nn.functional as F
from torch import nn

FIXED = sys.argv[1:] == ["fixed"]
torch.manual_seed(0)

classifier = nn.Sequential(
    nn.Conv2d(1, 6, kernel_size=5, stride=2), nn.ReLU(),
    nn.Conv2d(6, 12, kernel_size=3, stride=2), nn.ReLU(),
    nn.Flatten(), nn.Linear(12 * 5 * 5, 10),
)
adam = torch.optim.Adam(classifier.parameters(), lr=1e-4)
for _step in range(25):
    images, digits = torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))
    if FIXED:
        adam.zero_grad()
    loss = F.cross_entropy(classifier(images), digits)
    loss.backward()
    adam.step()
