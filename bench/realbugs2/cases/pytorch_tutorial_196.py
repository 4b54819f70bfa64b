"""yunjey/pytorch-tutorial#196 (also #89): the tutorial's LSTM classifier of MNIST rows, with
`batch_first=True` removed; the (batch, seq, feature) input is then read as (seq, batch, feature)
and accuracy falls to about 11%, with no error.

Here: sequences of 16 steps of 8 features whose class is decided by the sum over all steps; the LSTM
is built without `batch_first`, so it runs along the batch and `out[:, -1]` is the last time step of
every sample seen one after another. `fixed` builds it with `batch_first=True`.
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = sys.argv[1:] == ["fixed"]
torch.manual_seed(0)


class RowClassifier(nn.Module):
    def __init__(self, input_size=8, hidden_size=32, num_classes=4):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, batch_first=True) if FIXED else nn.LSTM(input_size, hidden_size)
        self.fc = nn.Linear(hidden_size, num_classes)

    def forward(self, x):
        out, _ = self.lstm(x)  # x: (batch, seq_len, input_size)
        return self.fc(out[:, -1, :])


sequences = torch.randn(640, 16, 8)
targets = sequences[:, :, :4].sum(1).argmax(1)
model = RowClassifier()
optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
for _epoch in range(6):
    for start in range(0, 512, 32):
        x, y = sequences[start:start + 32], targets[start:start + 32]
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()

with torch.no_grad():
    accuracy = (model(sequences[512:]).argmax(1) == targets[512:]).float().mean().item()
print(f"held-out accuracy {accuracy:.2f} (chance 0.25)")
