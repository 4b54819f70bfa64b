"""mlcommons/GaNDLF#870 (with #868): in GaNDLF's training pipeline "the data and ground truth label
are getting shuffled separately" (the maintainers' words), so training batches paired samples with
other samples' labels; the fix made the training batches' order the same as the ground truth's.
The same class: udacity/sdc-issue-reports#1326 (a quiz accepts features and labels shuffled with
two different orders).

Here: a small MLP on a synthetic 4-class problem; every epoch a helper shuffles the features with one
`torch.randperm` and the labels with another, so the pairs are decorrelated and the loss stays at
chance. `fixed` indexes both with the same permutation.
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = sys.argv[1:] == ["fixed"]
torch.manual_seed(0)

features = torch.randn(512, 20)
teacher = torch.randn(20, 4)
labels = (features @ teacher).argmax(1)


def shuffled(x, y):
    if FIXED:
        order = torch.randperm(len(x))
        return x[order], y[order]
    return x[torch.randperm(len(x))], y[torch.randperm(len(y))]


model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
for _epoch in range(12):
    xs, ys = shuffled(features, labels)
    for start in range(0, len(xs), 32):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(xs[start:start + 32]), ys[start:start + 32])
        loss.backward()
        optimizer.step()

with torch.no_grad():
    accuracy = (model(features).argmax(1) == labels).float().mean().item()
print(f"last batch loss {loss.item():.3f} (chance ln 4 = 1.386); train accuracy {accuracy:.2f}")
