"""sinhasam/vaal#2: the `test()` of the solver measured accuracy with the task model (VGG16 with
BatchNorm and Dropout) still in training mode: dropout stayed on and BatchNorm normalised each test
batch with its own statistics (and updated its running statistics from test data). The author
fixed it by calling `task_model.eval()` before testing.

Here: an MLP with BatchNorm and Dropout, tested under `torch.no_grad()` after each epoch on a test
set stored class by class, as `ImageFolder` lists it and an unshuffled loader serves it. `fixed`
calls `model.eval()` before testing and `model.train()` after.
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

FIXED = sys.argv[1:] == ["fixed"]
torch.manual_seed(0)

centres = torch.randn(5, 24) * 1.5
train_y = torch.randint(0, 5, (1000,))
train_x = centres[train_y] + torch.randn(1000, 24)
test_y = torch.arange(5).repeat_interleave(60)  # class by class
test_x = centres[test_y] + torch.randn(300, 24)

task_model = nn.Sequential(nn.Linear(24, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Dropout(0.5),
                           nn.Linear(128, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 5))
optimizer = torch.optim.SGD(task_model.parameters(), lr=0.05, momentum=0.9)


def test(model):
    if FIXED:
        model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in DataLoader(TensorDataset(test_x, test_y), batch_size=20):
            correct += (model(x).argmax(1) == y).sum().item()
    if FIXED:
        model.train()
    return correct / len(test_y)


task_model.train()
for _epoch in range(6):
    for x, y in DataLoader(TensorDataset(train_x, train_y), batch_size=32, shuffle=True):
        optimizer.zero_grad()
        loss = F.cross_entropy(task_model(x), y)
        loss.backward()
        optimizer.step()
    accuracy = test(task_model)

task_model.eval()
with torch.no_grad():
    true_accuracy = (task_model(test_x).argmax(1) == test_y).float().mean().item()
print(f"test() reports {accuracy:.2f}; the model in eval mode scores {true_accuracy:.2f}")
