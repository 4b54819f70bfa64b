"""An image classifier: a small CNN with dropout trained by Adadelta under a StepLR schedule,
evaluated every epoch in eval mode under ``torch.no_grad()``.

The images are synthetic: each class owns a fixed random stroke pattern, every sample is its class's
pattern, shifted by a pixel or two, plus noise.

    python cnn_classifier.py [--epochs 2] [--train 512] [--test 128] [--batch 32]
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

CLASSES = 10
SIDE = 28


def make_images(count: int, patterns: torch.Tensor, gen: torch.Generator) -> TensorDataset:
    labels = torch.randint(0, CLASSES, (count,), generator=gen)
    shifts = torch.randint(-2, 3, (count, 2), generator=gen)
    images = torch.stack([torch.roll(patterns[c], (int(dy), int(dx)), dims=(0, 1))
                          for c, (dy, dx) in zip(labels.tolist(), shifts, strict=True)])
    images = (images + 0.3 * torch.randn(images.shape, generator=gen)).unsqueeze(1)
    return TensorDataset(images, labels)


class SmallConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, kernel_size=5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.drop = nn.Dropout(0.3)
        self.classify = nn.Linear(32 * 7 * 7, CLASSES)

    def forward(self, images):
        return self.classify(self.drop(self.features(images).flatten(1)))


def evaluate(net, loader) -> tuple[float, float]:
    net.eval()
    total_loss, hits = 0.0, 0
    with torch.no_grad():
        for images, labels in loader:
            logits = net(images)
            total_loss += F.cross_entropy(logits, labels, reduction="sum").item()
            hits += (logits.argmax(1) == labels).sum().item()
    count = len(loader.dataset)
    return total_loss / count, hits / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--train", type=int, default=512)
    parser.add_argument("--test", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1.0)
    args = parser.parse_args()

    gen = torch.Generator().manual_seed(3)
    torch.manual_seed(3)
    patterns = (torch.rand(CLASSES, SIDE, SIDE, generator=gen) > 0.8).float()
    train_loader = DataLoader(make_images(args.train, patterns, gen), batch_size=args.batch, shuffle=True)
    test_loader = DataLoader(make_images(args.test, patterns, gen), batch_size=2 * args.batch)

    net = SmallConvNet()
    opt = torch.optim.Adadelta(net.parameters(), lr=args.lr)
    schedule = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    for epoch in range(1, args.epochs + 1):
        net.train()
        for images, labels in train_loader:
            opt.zero_grad()
            loss = F.cross_entropy(net(images), labels)
            loss.backward()
            opt.step()
        schedule.step()
        test_loss, accuracy = evaluate(net, test_loader)
        print(f"epoch {epoch}: train loss {loss.item():.3f}, test loss {test_loss:.3f}, accuracy {accuracy:.1%}")


if __name__ == "__main__":
    main()
