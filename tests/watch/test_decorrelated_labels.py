"""Runtime TP568: inputs and labels shuffled apart — the loss sits at the labels' entropy while a copy of the
model can fit a batch (mlcommons/GaNDLF#870 class).

Variants written from the contract before the check was tuned: numpy arrays shuffled with two
permutations every epoch (nn.CrossEntropyLoss, Adam, Dropout); a Dataset holding two index lists shuffled
separately, imbalanced classes (H < ln C), a DataLoader, F.cross_entropy, SGD with momentum and a
BatchNorm; labels permuted once before training, a model called with a keyword that returns (logits,
features), the loss on a reshape of the logits. Clean twins: one permutation for both; lr = 0 (stuck, but
not this bug); a slow learner on correct labels.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from tests.watch.util import watched

WATCHERS = ["decorrelated_labels"]


def _blobs(n, classes, dim, seed, weights=None):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, dim, generator=g) * 2.0
    probs = torch.tensor(weights if weights is not None else [1.0] * classes, dtype=torch.float)
    y = torch.multinomial(probs, n, replacement=True, generator=g)
    x = centers[y] + torch.randn(n, dim, generator=g)
    return x, y


def _train_numpy_two_permutations(epochs=8, same_permutation=False, lr=1e-3):
    np.random.seed(0)
    torch.manual_seed(0)
    x, y = _blobs(1024, 4, 20, seed=1)
    X, Y = x.numpy(), y.numpy()
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 4))
    criterion = nn.CrossEntropyLoss()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(epochs):
        p = np.random.permutation(len(X))
        X = X[p]
        Y = Y[p if same_permutation else np.random.permutation(len(Y))]
        for i in range(0, len(X), 64):
            xb, yb = torch.from_numpy(X[i:i + 64]), torch.from_numpy(Y[i:i + 64])
            loss = criterion(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model


class Pairs(Dataset):
    """Inputs and labels kept in two lists, each with its own order."""

    def __init__(self, x, y):
        self.x, self.y = x, y
        self.xi, self.yi = list(range(len(x))), list(range(len(y)))

    def reshuffle(self, g, together):
        self.xi = torch.randperm(len(self.x), generator=g).tolist()
        self.yi = list(self.xi) if together else torch.randperm(len(self.y), generator=g).tolist()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[self.xi[i]], self.y[self.yi[i]]


class ConvNet(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.conv = nn.Conv1d(1, 8, 5, padding=2)
        self.bn = nn.BatchNorm1d(8)
        self.fc = nn.Linear(8 * 24, classes)

    def forward(self, x):
        return self.fc(F.relu(self.bn(self.conv(x[:, None, :]))).flatten(1))


def _train_dataset_two_orders(epochs=7, together=False):
    torch.manual_seed(0)
    x, y = _blobs(1200, 5, 24, seed=2, weights=[5, 2, 1, 1, 1])
    data = Pairs(x, y)
    g = torch.Generator().manual_seed(3)
    loader = DataLoader(data, batch_size=64, shuffle=False)
    model = ConvNet(5)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(epochs):
        data.reshuffle(g, together)
        for xb, yb in loader:
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
    return model


class TwoOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 48), nn.GELU())
        self.head = nn.Linear(48, 3 * 2)       # two 3-class predictions per sample

    def forward(self, inputs):
        features = self.body(inputs)
        return self.head(features).view(-1, 2, 3), features


def _train_permuted_once(steps=120):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(4)
    x, y = _blobs(4096, 3, 16, seed=5)
    y2 = torch.stack([y, (y + 1) % 3], dim=1)   # two labels per sample, both from the input's class
    y2 = y2[torch.randperm(len(y2), generator=g)]   # ... permuted once, on their own
    model = TwoOutputs()
    opt = torch.optim.RMSprop(model.parameters(), lr=1e-3)
    for step in range(steps):
        i = (step * 32) % len(x)
        logits, _ = model(inputs=x[i:i + 32])
        loss = F.cross_entropy(logits.reshape(-1, 3), y2[i:i + 32].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()


def _findings(fn):
    return [f for f in watched(fn, WATCHERS) if f.code == "TP568"]


def test_numpy_arrays_shuffled_with_two_permutations():
    [f] = _findings(_train_numpy_two_permutations)
    assert f.severity.value == "warning" and "ln(4) = 1.386" in f.message and "copy of the model" in f.message


def test_a_dataset_with_two_orders_and_imbalanced_classes():
    [f] = _findings(_train_dataset_two_orders)
    assert f.severity.value == "warning" and "ln(5) = 1.609" in f.message


def test_labels_permuted_once_with_a_keyword_call_and_a_tuple_output():
    [f] = _findings(_train_permuted_once)
    assert f.severity.value == "warning"


def test_one_permutation_for_both_is_silent():
    assert _findings(lambda: _train_numpy_two_permutations(same_permutation=True)) == []


def test_one_order_for_both_in_the_dataset_is_silent():
    assert _findings(lambda: _train_dataset_two_orders(together=True)) == []


def test_a_model_that_cannot_learn_at_all_is_not_this_bug():
    assert _findings(lambda: _train_numpy_two_permutations(same_permutation=True, lr=0.0)) == []


def test_a_slow_learner_on_correct_labels_is_silent():
    def train():
        torch.manual_seed(0)
        x, y = _blobs(4096, 4, 32, seed=6)
        x = x * 0.05 + torch.randn_like(x)         # a weak signal
        model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.02)
        for step in range(120):
            i = (step * 32) % len(x)
            opt.zero_grad()
            F.cross_entropy(model(x[i:i + 32]), y[i:i + 32]).backward()
            opt.step()
    assert _findings(train) == []


def test_training_and_random_streams_are_bit_identical_under_the_probe():
    def run():
        model = _train_numpy_two_permutations()
        return model.state_dict(), torch.rand(3), np.random.rand(3)

    plain = run()
    out = {}
    findings = watched(lambda: out.setdefault("r", run()), WATCHERS)
    assert [f.severity.value for f in findings if f.code == "TP568"] == ["warning"]  # the probe ran
    state, after_torch, after_numpy = out["r"]
    for key, value in state.items():
        assert torch.equal(value, plain[0][key]), key
    assert torch.equal(after_torch, plain[1]) and np.array_equal(after_numpy, plain[2])
