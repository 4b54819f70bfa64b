"""Polynomial curve fitting with gradient descent written by hand: no optimizer object, the
parameters are updated in place through ``.data`` after each backward, and the gradients are cleared
with ``model.zero_grad()``.

    python manual_sgd.py [--degree 3] [--steps 400] [--lr 0.05]
"""

import argparse

import torch
from torch import nn


def features(x: torch.Tensor, degree: int) -> torch.Tensor:
    """Columns x, x**2, ..., x**degree."""
    return torch.stack([x ** k for k in range(1, degree + 1)], dim=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--degree", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    torch.manual_seed(7)
    true_coef = torch.randn(args.degree) * 0.8
    true_bias = torch.randn(())

    fit = nn.Linear(args.degree, 1)
    for step in range(1, args.steps + 1):
        x = torch.rand(args.batch) * 2 - 1
        target = features(x, args.degree) @ true_coef + true_bias
        error = nn.functional.mse_loss(fit(features(x, args.degree)).squeeze(1), target)

        fit.zero_grad()
        error.backward()
        for weight in fit.parameters():
            weight.data.sub_(args.lr * weight.grad.data)

        if step % 100 == 0:
            print(f"step {step:4d}  mse {error.item():.5f}")
    print("learned:", [round(v, 3) for v in fit.weight.data.flatten().tolist()],
          "true:", [round(v, 3) for v in true_coef.tolist()])


if __name__ == "__main__":
    main()
