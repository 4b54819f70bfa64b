"""Single-image super-resolution with a sub-pixel convolution network (Shi et al., 2016): a few
convolutions at low resolution produce ``factor**2`` channels that ``nn.PixelShuffle`` rearranges into
an image ``factor`` times larger; mean squared error against the full-resolution image, PSNR on a
held-out set under ``torch.no_grad()``.

The images are synthetic: sums of a few random 2-D sinusoids (one luminance channel); the low
resolution input is the image average-pooled by the factor.

    python super_resolution.py [--factor 3] [--epochs 2] [--images 48] [--batch 8]
"""

import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn


def smooth_images(count: int, side: int, gen: torch.Generator) -> torch.Tensor:
    grid = torch.linspace(0, 1, side)
    yy, xx = torch.meshgrid(grid, grid, indexing="ij")
    pictures = torch.zeros(count, 1, side, side)
    for _ in range(4):
        fy, fx = torch.rand(2, count, 1, 1, 1, generator=gen) * 12
        phase = torch.rand(count, 1, 1, 1, generator=gen) * 2 * math.pi
        pictures += torch.sin(2 * math.pi * (fy * yy + fx * xx) + phase)
    return (pictures - pictures.amin()) / (pictures.amax() - pictures.amin())


class SubPixelNet(nn.Module):
    def __init__(self, factor: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 32, 5, padding=2), nn.Tanh(),
            nn.Conv2d(32, 16, 3, padding=1), nn.Tanh(),
            nn.Conv2d(16, factor ** 2, 3, padding=1),
        )
        self.shuffle = nn.PixelShuffle(factor)

    def forward(self, low):
        return self.shuffle(self.body(low))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--factor", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--images", type=int, default=48)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()

    gen = torch.Generator().manual_seed(13)
    torch.manual_seed(13)
    side = 16 * args.factor
    high = smooth_images(args.images + 8, side, gen)
    low = F.avg_pool2d(high, args.factor)
    net = SubPixelNet(args.factor)
    adam = torch.optim.Adam(net.parameters(), lr=2e-3)
    for epoch in range(1, args.epochs + 1):
        net.train()
        for start in range(0, args.images, args.batch):
            adam.zero_grad()
            loss = F.mse_loss(net(low[start:start + args.batch]), high[start:start + args.batch])
            loss.backward()
            adam.step()
        net.eval()
        with torch.no_grad():
            mse = F.mse_loss(net(low[args.images:]), high[args.images:]).item()
        print(f"epoch {epoch}: train mse {loss.item():.4f}, held-out PSNR {10 * math.log10(1 / mse):.2f} dB")


if __name__ == "__main__":
    main()
