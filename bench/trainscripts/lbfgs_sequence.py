"""Sequence regression fitted with L-BFGS: the optimizer calls a closure that clears the gradients,
runs the model over the whole training set, back-propagates and returns the loss. The model is a
two-layer GRU cell stack in float64 that predicts the next value of a wave, and afterwards keeps
predicting from its own outputs (under ``torch.no_grad()``).

    python lbfgs_sequence.py [--steps 2] [--waves 16] [--length 50]
"""

import argparse

import torch
from torch import nn


class NextValue(nn.Module):
    def __init__(self, width: int = 32):
        super().__init__()
        self.width = width
        self.lower = nn.GRUCell(1, width)
        self.upper = nn.GRUCell(width, width)
        self.readout = nn.Linear(width, 1)

    def forward(self, series: torch.Tensor, extra: int = 0) -> torch.Tensor:
        h1 = series.new_zeros(series.shape[0], self.width)
        h2 = series.new_zeros(series.shape[0], self.width)
        predictions = []
        value = None
        for column in range(series.shape[1] + extra):
            value = series[:, column:column + 1] if column < series.shape[1] else value
            h1 = self.lower(value, h1)
            h2 = self.upper(h1, h2)
            value = self.readout(h2)
            predictions.append(value)
        return torch.cat(predictions, dim=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--waves", type=int, default=16)
    parser.add_argument("--length", type=int, default=50)
    args = parser.parse_args()

    torch.manual_seed(5)
    offsets = torch.randint(-30, 30, (args.waves, 1)).double()
    positions = torch.arange(args.length, dtype=torch.float64) + offsets
    waves = torch.sin(positions / 8.0)
    held_out, train = waves[:4], waves[4:]

    model = NextValue().double()
    mse = nn.MSELoss()
    lbfgs = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)
    for step in range(args.steps):
        def closure():
            lbfgs.zero_grad()
            loss = mse(model(train[:, :-1]), train[:, 1:])
            loss.backward()
            return loss

        loss = lbfgs.step(closure)
        with torch.no_grad():
            guess = model(held_out[:, :-1], extra=20)
            held_loss = mse(guess[:, :args.length - 1], held_out[:, 1:])
        print(f"step {step}: train loss {loss.item():.5f}, held-out loss {held_loss.item():.5f}")


if __name__ == "__main__":
    main()
