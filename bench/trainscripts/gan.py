"""A generative adversarial network: two models, two optimizers, alternating updates. The critic
learns on real samples and on generated ones detached from the generator's graph; then the
generator learns through the critic's judgement of fresh samples.

The real data are points on a ring of eight Gaussian blobs.

    python gan.py [--iterations 60] [--batch 64]
"""

import argparse
import math

import torch
from torch import nn

NOISE = 8


def ring_samples(count: int, gen: torch.Generator) -> torch.Tensor:
    angle = torch.randint(0, 8, (count,), generator=gen).float() * (2 * math.pi / 8)
    centres = torch.stack([angle.cos(), angle.sin()], dim=1) * 2.0
    return centres + 0.05 * torch.randn(count, 2, generator=gen)


def mlp(inputs: int, outputs: int, width: int = 64) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, width), nn.LeakyReLU(0.2),
                         nn.Linear(width, width), nn.LeakyReLU(0.2), nn.Linear(width, outputs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()

    gen = torch.Generator().manual_seed(2)
    torch.manual_seed(2)
    maker, critic = mlp(NOISE, 2), mlp(2, 1)
    maker_opt = torch.optim.Adam(maker.parameters(), lr=1e-3, betas=(0.5, 0.999))
    critic_opt = torch.optim.Adam(critic.parameters(), lr=1e-3, betas=(0.5, 0.999))
    judge = nn.BCEWithLogitsLoss()
    real_label = torch.ones(args.batch, 1)
    fake_label = torch.zeros(args.batch, 1)

    for it in range(1, args.iterations + 1):
        real = ring_samples(args.batch, gen)
        made = maker(torch.randn(args.batch, NOISE, generator=gen))

        critic_opt.zero_grad()
        critic_loss = judge(critic(real), real_label) + judge(critic(made.detach()), fake_label)
        critic_loss.backward()
        critic_opt.step()

        maker_opt.zero_grad()
        maker_loss = judge(critic(made), real_label)
        maker_loss.backward()
        maker_opt.step()

        if it % 20 == 0:
            print(f"iteration {it}: critic {critic_loss.item():.3f}, maker {maker_loss.item():.3f}")


if __name__ == "__main__":
    main()
