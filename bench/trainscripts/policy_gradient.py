"""REINFORCE (Williams, 1992) on an environment written here: one optimizer step per episode, the
loss is minus the sum of each action's log-probability times its normalised discounted return. The
policy network uses dropout while acting, as a regulariser.

The environment, ``Hover``: a craft must keep its height near zero by switching its thrust on or off;
gravity and a random gust act at every tick; the episode ends when the height leaves [-1, 1] or after
``limit`` ticks, with a reward of 1 per tick survived.

    python policy_gradient.py [--episodes 40] [--gamma 0.97]
"""

import argparse
import random

import torch
from torch import nn
from torch.distributions import Categorical


class Hover:
    tick = 0.1        # seconds per step
    thrust = 2.0      # upward acceleration with the thrust on, m/s^2 (gravity is 1.0 here)
    gust = 0.3        # standard deviation of the random acceleration

    def __init__(self, limit: int = 200, seed: int = 0):
        self.limit, self.rng = limit, random.Random(seed)

    def start(self) -> list[float]:
        self.height, self.speed, self.ticks = self.rng.uniform(-0.2, 0.2), 0.0, 0
        return [self.height, self.speed]

    def act(self, thrust_on: int) -> tuple[list[float], float, bool]:
        accel = (self.thrust if thrust_on else 0.0) - 1.0 + self.rng.gauss(0.0, self.gust)
        self.speed += accel * self.tick
        self.height += self.speed * self.tick
        self.ticks += 1
        over = abs(self.height) > 1.0 or self.ticks >= self.limit
        return [self.height, self.speed], 1.0, over


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 64), nn.Dropout(0.3), nn.ReLU(), nn.Linear(64, 2))

    def forward(self, state):
        return Categorical(logits=self.net(state))


def discounted(rewards: list[float], gamma: float) -> torch.Tensor:
    out, running = [], 0.0
    for r in reversed(rewards):
        running = r + gamma * running
        out.append(running)
    returns = torch.tensor(out[::-1])
    return (returns - returns.mean()) / (returns.std() + 1e-6) if len(out) > 1 else returns * 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--gamma", type=float, default=0.97)
    args = parser.parse_args()

    torch.manual_seed(41)
    env, policy = Hover(), Policy()
    adam = torch.optim.Adam(policy.parameters(), lr=1e-2)
    average = 0.0
    for episode in range(1, args.episodes + 1):
        state, log_probs, rewards, over = env.start(), [], [], False
        while not over:
            choice = policy(torch.tensor(state))
            action = choice.sample()
            log_probs.append(choice.log_prob(action))
            state, reward, over = env.act(int(action))
            rewards.append(reward)
        loss = -(torch.stack(log_probs) * discounted(rewards, args.gamma)).sum()
        adam.zero_grad()
        loss.backward()
        adam.step()
        average = 0.9 * average + 0.1 * len(rewards)
        if episode % 10 == 0:
            print(f"episode {episode}: lasted {len(rewards)} ticks, running average {average:.1f}")


if __name__ == "__main__":
    main()
