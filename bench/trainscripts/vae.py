"""A variational autoencoder: the encoder gives a mean and a log-variance, a sample is drawn with the
reparameterisation trick, the decoder's sigmoid output is scored with binary cross-entropy (summed)
plus the KL divergence to the unit Gaussian. Test loss under ``torch.no_grad()`` in eval mode, and
samples decoded from the prior.

The data are 16x16 binary pictures: random axis-aligned rectangles.

    python vae.py [--epochs 2] [--train 512] [--test 128] [--batch 32]
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

SIDE = 16


def rectangles(count: int, gen: torch.Generator) -> torch.Tensor:
    corners = torch.randint(0, SIDE, (count, 4), generator=gen)
    top, bottom = corners[:, 0].minimum(corners[:, 1]), corners[:, 0].maximum(corners[:, 1])
    left, right = corners[:, 2].minimum(corners[:, 3]), corners[:, 2].maximum(corners[:, 3])
    rows = torch.arange(SIDE)[None, :, None]
    cols = torch.arange(SIDE)[None, None, :]
    inside = ((rows >= top[:, None, None]) & (rows <= bottom[:, None, None])
              & (cols >= left[:, None, None]) & (cols <= right[:, None, None]))
    return inside.float().flatten(1)


class Autoencoder(nn.Module):
    def __init__(self, latent: int = 8, hidden: int = 128):
        super().__init__()
        self.encode_body = nn.Sequential(nn.Linear(SIDE * SIDE, hidden), nn.ReLU())
        self.to_mean = nn.Linear(hidden, latent)
        self.to_logvar = nn.Linear(hidden, latent)
        self.decode_body = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, SIDE * SIDE))

    def decode(self, z):
        return torch.sigmoid(self.decode_body(z))

    def forward(self, pictures):
        h = self.encode_body(pictures)
        mean, logvar = self.to_mean(h), self.to_logvar(h)
        z = mean + torch.randn_like(mean) * torch.exp(0.5 * logvar)
        return self.decode(z), mean, logvar


def elbo_loss(rebuilt, pictures, mean, logvar):
    reconstruction = F.binary_cross_entropy(rebuilt, pictures, reduction="sum")
    divergence = -0.5 * torch.sum(1 + logvar - mean.pow(2) - logvar.exp())
    return reconstruction + divergence


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--train", type=int, default=512)
    parser.add_argument("--test", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()

    gen = torch.Generator().manual_seed(4)
    torch.manual_seed(4)
    train, test = rectangles(args.train, gen), rectangles(args.test, gen)
    vae = Autoencoder()
    adam = torch.optim.Adam(vae.parameters(), lr=1e-3)
    for epoch in range(1, args.epochs + 1):
        vae.train()
        running = 0.0
        for start in range(0, args.train, args.batch):
            batch = train[start:start + args.batch]
            adam.zero_grad()
            loss = elbo_loss_of(vae, batch)
            loss.backward()
            running += loss.item()
            adam.step()
        vae.eval()
        with torch.no_grad():
            test_loss = elbo_loss_of(vae, test).item() / args.test
            samples = vae.decode(torch.randn(16, vae.to_mean.out_features))
        print(f"epoch {epoch}: train {running / args.train:.2f}, test {test_loss:.2f} per picture, "
              f"sample mean {samples.mean().item():.3f}")


def elbo_loss_of(vae: Autoencoder, batch: torch.Tensor) -> torch.Tensor:
    rebuilt, mean, logvar = vae(batch)
    return elbo_loss(rebuilt, batch, mean, logvar)


if __name__ == "__main__":
    main()
