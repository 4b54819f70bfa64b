"""deepset-ai/FARM#229: a document-regression head squeezed its logits to (batch,) while the labels
stayed (batch, 1); `MSELoss` broadcast the two to (batch, batch) (torch only prints a UserWarning)
and the model learns the mean of the targets instead of each target. Fixed in FARM#230. The same
(N, 1) against (N,) case is what pytorch/pytorch#16045 reports.

Here: an MLP regression head on synthetic features, logits squeezed, labels kept as a column as a
dataset returns them. `fixed` compares shapes that match (the labels flattened too).
"""

import sys

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

FIXED = sys.argv[1:] == ["fixed"]
torch.manual_seed(0)


class RegressionHead(nn.Module):
    def __init__(self, dim=24):
        super().__init__()
        self.feed_forward = nn.Sequential(nn.Linear(dim, 64), nn.Tanh(), nn.Linear(64, 1))
        self.loss_fct = nn.MSELoss()

    def logits_to_loss(self, logits, label_ids):
        if FIXED:
            label_ids = label_ids.view(-1)
        return self.loss_fct(logits, label_ids)

    def forward(self, x):
        return self.feed_forward(x).squeeze(-1)


features = torch.randn(1024, 24)
targets = (features[:, :6].sum(1, keepdim=True) + 0.1 * torch.randn(1024, 1)) * 2 + 8  # (N, 1)
head = RegressionHead()
optimizer = torch.optim.Adam(head.parameters(), lr=3e-3)
for _epoch in range(8):
    for x, y in DataLoader(TensorDataset(features, targets), batch_size=32, shuffle=True):
        optimizer.zero_grad()
        loss = head.logits_to_loss(head(x), y)
        loss.backward()
        optimizer.step()

with torch.no_grad():
    residual = head(features) - targets.view(-1)
    r2 = 1 - residual.pow(2).mean() / targets.var()
print(f"R^2 of the predictions {r2.item():.2f}")
