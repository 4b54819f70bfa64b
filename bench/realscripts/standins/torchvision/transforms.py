"""The transforms pytorch/examples uses, on stand-in PIL images and tensors."""

from __future__ import annotations

import torch
from PIL.Image import BICUBIC, Image


class Compose:
    def __init__(self, steps):
        self.steps = list(steps)

    def __call__(self, x):
        for step in self.steps:
            x = step(x)
        return x


class ToTensor:
    """An image (or uint8 array) to a float tensor (C, H, W) in [0, 1]."""

    def __call__(self, picture):
        pixels = picture.pixels if isinstance(picture, Image) else torch.as_tensor(picture)
        if pixels.dim() == 2:
            pixels = pixels[..., None]
        chw = pixels.permute(2, 0, 1).contiguous()
        return chw.float().div(255) if chw.dtype == torch.uint8 else chw.float()


class Normalize:
    def __init__(self, mean, std):
        self.mean = torch.as_tensor(mean, dtype=torch.float32).view(-1, 1, 1)
        self.std = torch.as_tensor(std, dtype=torch.float32).view(-1, 1, 1)

    def __call__(self, tensor):
        return (tensor - self.mean) / self.std


class Lambda:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, x):
        return self.fn(x)


def _height_width(x) -> tuple[int, int]:
    return (x.size[1], x.size[0]) if isinstance(x, Image) else tuple(x.shape[-2:])


class Resize:
    """An int resizes the shorter side to it, keeping the aspect ratio; a pair is (height, width)."""

    def __init__(self, size, interpolation=BICUBIC):
        self.size, self.interpolation = size, interpolation

    def __call__(self, x):
        h, w = _height_width(x)
        if isinstance(self.size, int):
            short = min(h, w)
            h, w = ((self.size, round(w * self.size / short)) if h == short
                    else (round(h * self.size / short), self.size))
        else:
            h, w = self.size
        if isinstance(x, Image):
            return x.resize((w, h), self.interpolation)
        return torch.nn.functional.interpolate(x[None].float(), size=(h, w), mode="bilinear")[0]


class CenterCrop:
    def __init__(self, size):
        self.size = (size, size) if isinstance(size, int) else tuple(size)

    def __call__(self, x):
        h, w = _height_width(x)
        th, tw = self.size
        top, left = (h - th) // 2, (w - tw) // 2
        if isinstance(x, Image):
            return x.crop((left, top, left + tw, top + th))
        return x[..., top:top + th, left:left + tw]
