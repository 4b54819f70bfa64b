"""Forward-forward training (Hinton, 2022): no loss flows through the whole network. Each layer has
its own optimizer and its own loss, which pushes the layer's "goodness" (mean squared activation) up
on positive samples (an input with its true label written in) and down on negative ones (the same
input with a wrong label); a layer's input is the previous layer's output detached and normalised.
Layers are trained one after the other; prediction picks the label with the most total goodness.

    python forward_forward.py [--layer-steps 20] [--samples 256] [--width 128]
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

CLASSES = 10
PIXELS = 100


def with_label(x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Writes a one-hot label over the first CLASSES inputs."""
    marked = x.clone()
    marked[:, :CLASSES] = F.one_hot(labels, CLASSES).float() * x.abs().max()
    return marked


class GoodnessLayer(nn.Module):
    def __init__(self, inputs: int, outputs: int, threshold: float = 2.0, lr: float = 0.03):
        super().__init__()
        self.linear = nn.Linear(inputs, outputs)
        self.threshold = threshold
        self.opt = torch.optim.Adam(self.linear.parameters(), lr=lr)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        unit = x / (x.norm(dim=1, keepdim=True) + 1e-6)
        return F.relu(self.linear(unit))

    def goodness(self, x: torch.Tensor) -> torch.Tensor:
        return self(x).pow(2).mean(dim=1)

    def fit(self, positive: torch.Tensor, negative: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
        for _ in range(steps):
            margin = torch.cat([self.threshold - self.goodness(positive), self.goodness(negative) - self.threshold])
            loss = F.softplus(margin).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
        return self(positive).detach(), self(negative).detach()


def predict(layers: list[GoodnessLayer], x: torch.Tensor) -> torch.Tensor:
    scores = []
    with torch.no_grad():
        for label in range(CLASSES):
            h = with_label(x, torch.full((x.shape[0],), label))
            total = torch.zeros(x.shape[0])
            for layer in layers:
                h = layer(h)
                total += h.pow(2).mean(dim=1)
            scores.append(total)
    return torch.stack(scores, dim=1).argmax(dim=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layer-steps", type=int, default=20)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--width", type=int, default=128)
    args = parser.parse_args()

    gen = torch.Generator().manual_seed(9)
    torch.manual_seed(9)
    prototypes = torch.randn(CLASSES, PIXELS, generator=gen)
    labels = torch.randint(0, CLASSES, (args.samples,), generator=gen)
    x = prototypes[labels] + 0.5 * torch.randn(args.samples, PIXELS, generator=gen)
    wrong = (labels + torch.randint(1, CLASSES, labels.shape, generator=gen)) % CLASSES

    layers = [GoodnessLayer(PIXELS, args.width), GoodnessLayer(args.width, args.width)]
    positive, negative = with_label(x, labels), with_label(x, wrong)
    for number, layer in enumerate(layers):
        positive, negative = layer.fit(positive, negative, args.layer_steps)
        print(f"layer {number} trained")
    accuracy = (predict(layers, x) == labels).float().mean().item()
    print(f"training accuracy {accuracy:.1%}")


if __name__ == "__main__":
    main()
