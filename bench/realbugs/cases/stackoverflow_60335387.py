"""Stack Overflow 60335387 ("PyTorch MNIST example not converge"): `optimizer.zero_grad()` is missing.

Original: the MNIST example with the `zero_grad()` call left out; with lr=1e-4 the loss gets worse
as gradients pile up. Here: the same CNN on random 28x28 images. `fixed` zeroes the gradients.
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = sys.argv[1:] == ["fixed"]
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.fc1 = nn.Linear(16 * 12 * 12, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return F.log_softmax(self.fc2(x), dim=1)


model = Net()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
criterion = nn.NLLLoss()
for batch_idx in range(25):
    data, label = torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))
    if FIXED:
        optimizer.zero_grad()
    pred_score = model(data)
    loss = criterion(pred_score, label)
    loss.backward()
    optimizer.step()
