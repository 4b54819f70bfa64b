"""Synthetic stand-ins for the data sources the pytorch/examples scripts download.

torchvision is not a torchpact dependency and the bench runs offline, so the scripts in this folder
import ``datasets`` / ``transforms`` / ``utils`` from here instead of torchvision. Only the data
changes: each image class has its own fixed pattern plus noise, so the models can learn and the loss
falls as it would on the real data. ``CartPole`` reimplements the classic control dynamics that
``gymnasium.make("CartPole-v1")`` provides (same equations and termination thresholds).
"""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import torch
import torch.nn.functional as F

TRAIN_SIZE = 512
TEST_SIZE = 128


class _ClassImages(torch.utils.data.Dataset):
    """Images of ``num_classes`` classes: a per-class pattern plus noise, stored as uint8 like MNIST."""

    def __init__(self, size, image_size, num_classes=10, transform=None, seed=0):
        g = torch.Generator().manual_seed(seed)
        protos = torch.rand((num_classes, *image_size), generator=g)
        self.targets = torch.randint(0, num_classes, (size,), generator=g)
        noise = 0.3 * torch.rand((size, *image_size), generator=g)
        images = (0.7 * protos[self.targets] + noise).clamp(0, 1)
        self.data = (images * 255).to(torch.uint8)
        if self.data.shape[1] == 1:
            self.data = self.data.squeeze(1)  # MNIST keeps (N, 28, 28)
        self.transform = transform
        self.classes = [str(i) for i in range(num_classes)]

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, index):
        img = self.data[index]
        if self.transform is not None:
            img = self.transform(img)
        return img, int(self.targets[index])


def _mnist(root, train=True, download=False, transform=None, target_transform=None):
    return _ClassImages(TRAIN_SIZE if train else TEST_SIZE, (1, 28, 28), 10, transform, seed=0 if train else 1)


def _fake_data(size=TRAIN_SIZE, image_size=(3, 224, 224), num_classes=10, transform=None):
    return _ClassImages(size, image_size, num_classes, transform)


datasets = SimpleNamespace(MNIST=_mnist, FakeData=_fake_data)


class _Compose:
    def __init__(self, fns):
        self.fns = fns

    def __call__(self, x):
        for fn in self.fns:
            x = fn(x)
        return x


def _to_tensor():
    def apply(x):
        x = x.float().div(255) if x.dtype == torch.uint8 else x.float()
        return x.unsqueeze(0) if x.dim() == 2 else x
    return apply


def _normalize(mean, std):
    def apply(x):
        m = torch.tensor(mean).view(-1, 1, 1)
        s = torch.tensor(std).view(-1, 1, 1)
        return (x - m) / s
    return apply


def _resize(size):
    def apply(x):
        squeeze = x.dim() == 2
        x = x.unsqueeze(0) if squeeze else x
        out = F.interpolate(x.float().unsqueeze(0), size=(size, size), mode="bilinear").squeeze(0)
        out = out.to(x.dtype) if x.dtype == torch.uint8 else out
        return out.squeeze(0) if squeeze else out
    return apply


def _center_crop(size):
    def apply(x):
        h, w = x.shape[-2:]
        top, left = (h - size) // 2, (w - size) // 2
        return x[..., top:top + size, left:left + size]
    return apply


transforms = SimpleNamespace(Compose=_Compose, ToTensor=_to_tensor, Normalize=_normalize,
                             Lambda=lambda fn: fn, Resize=_resize, CenterCrop=_center_crop)


def _save_image(tensor, fp, **kwargs):
    """Image files are not the point of the bench: nothing is written."""


utils = SimpleNamespace(save_image=_save_image)


class CartPole:
    """CartPole-v1 (Barto, Sutton & Anderson 1983) with gymnasium's reset/step signatures."""

    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    theta_threshold = 12 * 2 * math.pi / 360
    x_threshold = 2.4
    max_steps = 500

    def __init__(self):
        self.rng = random.Random(0)
        # gymnasium says 475; the bench stops once the running reward passes 20 (a few dozen episodes).
        self.spec = SimpleNamespace(reward_threshold=20.0)

    def reset(self, seed=None):
        if seed is not None:
            self.rng = random.Random(seed)
        self.state = [self.rng.uniform(-0.05, 0.05) for _ in range(4)]
        self.steps = 0
        import numpy as np
        return np.array(self.state, dtype=np.float32), {}

    def step(self, action):
        import numpy as np
        x, x_dot, theta, theta_dot = self.state
        force = self.force_mag if action == 1 else -self.force_mag
        total_mass = self.masspole + self.masscart
        polemass_length = self.masspole * self.length
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + polemass_length * theta_dot**2 * sin) / total_mass
        thetaacc = (self.gravity * sin - cos * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * cos**2 / total_mass))
        xacc = temp - polemass_length * thetaacc * cos / total_mass
        x, x_dot = x + self.tau * x_dot, x_dot + self.tau * xacc
        theta, theta_dot = theta + self.tau * theta_dot, theta_dot + self.tau * thetaacc
        self.state = [x, x_dot, theta, theta_dot]
        self.steps += 1
        terminated = abs(x) > self.x_threshold or abs(theta) > self.theta_threshold
        truncated = self.steps >= self.max_steps
        return np.array(self.state, dtype=np.float32), 1.0, terminated, truncated, {}


gym = SimpleNamespace(make=lambda name, **kwargs: CartPole())


def write_cora(path="./cora", nodes=1800, features=200, classes=7, edges=5000, seed=0):
    """Writes ``cora.content`` / ``cora.cites`` in Cora's format: sparse binary word features that
    depend on the class, and citations that mostly link papers of the same class."""
    import os
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (nodes,), generator=g)
    word_prob = 0.02 + 0.15 * torch.rand((classes, features), generator=g)
    words = (torch.rand((nodes, features), generator=g) < word_prob[labels]).int()
    ids = torch.randperm(100000, generator=g)[:nodes] + 1
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "cora.content"), "w") as f:
        f.writelines(f"{ids[i]}\t" + "\t".join(map(str, words[i].tolist())) + f"\tClass_{labels[i]}\n" for i in range(nodes))
    src = torch.randint(0, nodes, (edges,), generator=g)
    same = torch.rand(edges, generator=g) < 0.8
    by_class = [torch.nonzero(labels == c).flatten() for c in range(classes)]
    with open(os.path.join(path, "cora.cites"), "w") as f:
        for s, keep in zip(src.tolist(), same.tolist()):
            pool = by_class[int(labels[s])] if keep else torch.arange(nodes)
            d = int(pool[torch.randint(0, len(pool), (1,), generator=g)])
            f.write(f"{ids[d]}\t{ids[s]}\n")


def write_corpus(path, vocab=300, words=(6000, 1200, 1200), seed=0):
    """Writes ``train.txt`` / ``valid.txt`` / ``test.txt`` from a fixed first-order Markov chain, so
    a language model has structure to learn (WikiText-2's layout: one sentence a line)."""
    import os
    g = torch.Generator().manual_seed(seed)
    transitions = torch.softmax(3 * torch.randn((vocab, vocab), generator=g), dim=1)
    os.makedirs(path, exist_ok=True)
    for name, count in zip(("train", "valid", "test"), words):
        word, line, lines = 0, [], []
        for _ in range(count):
            word = int(torch.multinomial(transitions[word], 1, generator=g))
            line.append(f"w{word}")
            if len(line) == 12:
                lines.append(" ".join(line))
                line = []
        with open(os.path.join(path, f"{name}.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
