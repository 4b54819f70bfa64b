"""A deliberate bug, kept on purpose: ``F.cross_entropy`` over a model with ONE output. Cross-entropy
takes a softmax over the class dimension; with one class the softmax is 1 and the log-probability
0 whatever the logit, so the loss is exactly 0 (here with float targets of shape (N, 1), read as
class probabilities), every gradient is 0 and nothing is learned. ``torchpact run`` must report
TP252 for it and no other warning or error.

The same mistake is in pytorch/examples' distributed/ddp-tutorial-series (a ``Linear(20, 1)`` model
under ``F.cross_entropy``); this script is written here, around the bug only.

    python single_logit_ce.py [--epochs 3] [--samples 256] [--batch 32]
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(47)
    inputs = torch.randn(args.samples, 16)
    scores = torch.sigmoid(inputs[:, :4].sum(1, keepdim=True))  # a float target in (0, 1) per sample
    loader = DataLoader(TensorDataset(inputs, scores), batch_size=args.batch, shuffle=True)

    scorer = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    sgd = torch.optim.SGD(scorer.parameters(), lr=0.01)
    for epoch in range(args.epochs):
        for batch, target in loader:
            sgd.zero_grad()
            loss = F.cross_entropy(scorer(batch), target)  # the bug: one logit per sample
            loss.backward()
            sgd.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
