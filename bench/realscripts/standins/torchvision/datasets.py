"""Synthetic datasets under torchvision's names. Each class has a fixed random pattern; a sample is
its class's pattern with noise, handed out as a (stand-in) PIL image, so a model can learn and the
loss falls as on real data. Sizes: ``STANDIN_TRAIN_SIZE`` / ``STANDIN_TEST_SIZE`` (default 512 / 128).
"""

from __future__ import annotations

import os

import torch
from PIL.Image import Image


def _size(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


class _PatternImages(torch.utils.data.Dataset):
    def __init__(self, count: int, channels: int, height: int, width: int, classes: int, seed: int,
                 transform=None, target_transform=None):
        gen = torch.Generator().manual_seed(seed)
        layout = torch.Generator().manual_seed(1000 + classes * 7 + height)  # the same classes in train and test
        patterns = torch.rand(classes, height, width, channels, generator=layout)
        self.targets = torch.randint(0, classes, (count,), generator=gen)
        mixed = 0.75 * patterns[self.targets] + 0.25 * torch.rand(count, height, width, channels, generator=gen)
        self.data = (mixed * 255).round().to(torch.uint8)
        self.mode = "L" if channels == 1 else "RGB"
        self.transform, self.target_transform = transform, target_transform
        self.classes = [str(c) for c in range(classes)]

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int):
        pixels = self.data[index]
        image = Image(pixels.squeeze(2) if self.mode == "L" else pixels, self.mode)
        target = int(self.targets[index])
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target


def MNIST(root=None, train=True, transform=None, target_transform=None, download=False):  # noqa: N802
    count = _size("STANDIN_TRAIN_SIZE", 512) if train else _size("STANDIN_TEST_SIZE", 128)
    return _PatternImages(count, 1, 28, 28, 10, 0 if train else 1, transform, target_transform)


def FakeData(size=None, image_size=(3, 224, 224), num_classes=10, transform=None, target_transform=None,  # noqa: N802
             random_offset=0):
    count = size if size is not None else _size("STANDIN_TRAIN_SIZE", 1000)
    channels, height, width = image_size
    return _PatternImages(count, channels, height, width, num_classes, 2 + random_offset, transform, target_transform)
