"""pytorch/pytorch#51800: `torch.nn.utils.spectral_norm` draws its `u` and `v` vectors at random and
refines them by power iteration only in forward passes made in training mode. A model evaluated
(`eval()`) before its first training forward divides each weight by `u @ W @ v` for two unrelated
random vectors, a value near zero of either sign, so its outputs are orders of magnitude off (still
so on torch 2.13). The issue's scenario: a GAN's networks evaluated before training starts, or an
initialisation checked in eval mode.

Here: a small GAN whose discriminator holds `spectral_norm` layers; before training, the script
scores real and generated samples with both networks in eval mode (a sanity check of the set-up),
then trains. The discriminator's eval scores before the first training forward are off by about
three orders of magnitude. `fixed` uses `torch.nn.utils.parametrizations.spectral_norm`, which runs
power iteration when it is registered.
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = sys.argv[1:] == ["fixed"]
spectral_norm = torch.nn.utils.parametrizations.spectral_norm if FIXED else torch.nn.utils.spectral_norm
torch.manual_seed(0)

generator = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 32))
discriminator = nn.Sequential(spectral_norm(nn.Linear(32, 128)), nn.LeakyReLU(0.2),
                              spectral_norm(nn.Linear(128, 128)), nn.LeakyReLU(0.2), spectral_norm(nn.Linear(128, 1)))
real_data = torch.randn(512, 32) * 0.5 + torch.linspace(-1, 1, 32)


def scores():
    generator.eval()
    discriminator.eval()
    with torch.no_grad():
        real = discriminator(real_data[:128]).abs().mean().item()
        fake = discriminator(generator(torch.randn(128, 8))).abs().mean().item()
    generator.train()
    discriminator.train()
    return real, fake


before = scores()
opt_g = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
for _step in range(60):
    real = real_data[torch.randint(0, 512, (32,))]
    fake = generator(torch.randn(32, 8))
    opt_d.zero_grad()
    d_loss = F.softplus(-discriminator(real)).mean() + F.softplus(discriminator(fake.detach())).mean()
    d_loss.backward()
    opt_d.step()
    opt_g.zero_grad()
    g_loss = F.softplus(-discriminator(fake)).mean()
    g_loss.backward()
    opt_g.step()
after = scores()
print(f"mean |D(x)| in eval mode before training: real {before[0]:.3g}, fake {before[1]:.3g}; "
      f"after 60 steps: real {after[0]:.3g}, fake {after[1]:.3g}")
