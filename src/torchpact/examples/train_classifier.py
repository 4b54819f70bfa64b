"""A small image classifier trained on random data. It runs, and it even prints a falling loss —
but it carries several of the bugs torchpact exists for (see `make demo`)."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Classifier(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4))
        self.heads = [nn.Linear(16 * 16, num_classes) for _ in range(2)]  # not registered!
        self.dropout = nn.Dropout(0.2)

    def forward(self, x):
        h = self.dropout(self.features(x).flatten(1))
        return torch.softmax(self.heads[0](h), dim=-1)


def evaluate(model, loader):
    model.eval()
    correct = 0
    for x, y in loader:  # no torch.no_grad(): every batch builds a graph
        correct += (model(x).argmax(-1) == y).sum().item()
    return correct / len(loader.dataset)


def main():
    data = TensorDataset(torch.randn(256, 3, 16, 16), torch.randint(0, 10, (256,)))
    loader = DataLoader(data, batch_size=32, shuffle=True)
    model = Classifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()
    model.train()
    history = []
    running = 0.0
    for epoch in range(3):
        for x, y in loader:
            probs = model(x)
            loss = criterion(probs, y)  # probabilities into CrossEntropyLoss
            loss.backward()
            optimizer.step()  # gradients are never zeroed
            running += loss
            history.append(probs)
        print(f"epoch {epoch}: accuracy {evaluate(model, loader):.2f}")  # eval() sticks
    print(F.log_softmax(torch.zeros(3), -1), running)


if __name__ == "__main__":
    main()
