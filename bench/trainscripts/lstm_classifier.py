"""A recurrent sequence classifier: an LSTM reads each sequence step by step, its last hidden state
goes through a linear layer; Adam with a StepLR schedule, evaluation under ``torch.no_grad()``.

Each class is a noisy sum of two sinusoids whose frequencies belong to the class.

    python lstm_classifier.py [--epochs 2] [--train 512] [--test 128] [--batch 32]
"""

import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn

CLASSES = 6


def make_sequences(count: int, length: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    labels = torch.randint(0, CLASSES, (count,), generator=gen)
    t = torch.linspace(0, 2 * math.pi, length)
    slow, fast = 1.0 + labels.float(), 2.5 + 0.5 * labels.float()
    phase = torch.rand(count, 1, generator=gen) * 2 * math.pi
    wave = torch.sin(slow[:, None] * t + phase) + 0.5 * torch.cos(fast[:, None] * t)
    wave = wave + 0.2 * torch.randn(count, length, generator=gen)
    return wave.unsqueeze(-1), labels


class SequenceClassifier(nn.Module):
    def __init__(self, hidden: int = 48):
        super().__init__()
        self.rnn = nn.LSTM(input_size=1, hidden_size=hidden, batch_first=True)
        self.out = nn.Linear(hidden, CLASSES)

    def forward(self, seq):
        _, (h_last, _) = self.rnn(seq)
        return self.out(h_last[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--train", type=int, default=512)
    parser.add_argument("--test", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=40)
    args = parser.parse_args()

    gen = torch.Generator().manual_seed(11)
    torch.manual_seed(11)
    train_x, train_y = make_sequences(args.train, args.length, gen)
    test_x, test_y = make_sequences(args.test, args.length, gen)

    classifier = SequenceClassifier()
    adam = torch.optim.Adam(classifier.parameters(), lr=3e-3)
    decay = torch.optim.lr_scheduler.StepLR(adam, step_size=1, gamma=0.5)
    for epoch in range(args.epochs):
        classifier.train()
        order = torch.randperm(args.train, generator=gen)
        for start in range(0, args.train, args.batch):
            pick = order[start:start + args.batch]
            adam.zero_grad()
            loss = F.cross_entropy(classifier(train_x[pick]), train_y[pick])
            loss.backward()
            adam.step()
        decay.step()
        classifier.eval()
        with torch.no_grad():
            accuracy = (classifier(test_x).argmax(1) == test_y).float().mean().item()
        print(f"epoch {epoch + 1}: last batch loss {loss.item():.3f}, test accuracy {accuracy:.1%}")


if __name__ == "__main__":
    main()
