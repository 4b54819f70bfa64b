"""Advantage actor-critic on an environment written here: one network with a shared body, a policy
head and a value head; after each episode a single loss (policy term weighted by the detached
advantage, plus the smooth-L1 error of the value head against the discounted return) is
back-propagated and one optimizer steps.

The environment, ``Maze``: an agent walks on a small grid with a few walls from one corner to the
opposite one; each move costs 0.04, reaching the exit pays 1, an episode lasts at most ``limit``
moves. The state is the one-hot cell.

    python actor_critic.py [--episodes 60] [--side 5] [--gamma 0.95]
"""

import argparse
import random

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical

MOVES = ((0, 1), (1, 0), (0, -1), (-1, 0))


class Maze:
    def __init__(self, side: int, limit: int = 60, seed: int = 0):
        rng = random.Random(seed)
        self.side, self.limit = side, limit
        inner = [(r, c) for r in range(side) for c in range(side) if (r, c) not in ((0, 0), (side - 1, side - 1))]
        self.walls = set(rng.sample(inner, side // 2))

    def observe(self) -> torch.Tensor:
        cell = torch.zeros(self.side * self.side)
        cell[self.row * self.side + self.col] = 1.0
        return cell

    def start(self) -> torch.Tensor:
        self.row, self.col, self.moves = 0, 0, 0
        return self.observe()

    def act(self, move: int) -> tuple[torch.Tensor, float, bool]:
        dr, dc = MOVES[move]
        r, c = self.row + dr, self.col + dc
        if 0 <= r < self.side and 0 <= c < self.side and (r, c) not in self.walls:
            self.row, self.col = r, c
        self.moves += 1
        home = (self.row, self.col) == (self.side - 1, self.side - 1)
        return self.observe(), (1.0 if home else -0.04), home or self.moves >= self.limit


class ActorCritic(nn.Module):
    def __init__(self, cells: int, hidden: int = 64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(cells, hidden), nn.ReLU())
        self.policy = nn.Linear(hidden, len(MOVES))
        self.value = nn.Linear(hidden, 1)

    def forward(self, state):
        h = self.body(state)
        return Categorical(logits=self.policy(h)), self.value(h).squeeze(-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=60)
    parser.add_argument("--side", type=int, default=5)
    parser.add_argument("--gamma", type=float, default=0.95)
    args = parser.parse_args()

    torch.manual_seed(43)
    maze = Maze(args.side)
    agent = ActorCritic(args.side * args.side)
    opt = torch.optim.Adam(agent.parameters(), lr=3e-3)
    for episode in range(1, args.episodes + 1):
        state, over = maze.start(), False
        log_probs, values, rewards = [], [], []
        while not over:
            choice, value = agent(state)
            move = choice.sample()
            log_probs.append(choice.log_prob(move))
            values.append(value)
            state, reward, over = maze.act(int(move))
            rewards.append(reward)
        returns, running = [], 0.0
        for r in reversed(rewards):
            running = r + args.gamma * running
            returns.insert(0, running)
        returns = torch.tensor(returns)
        values = torch.stack(values)
        advantage = returns - values.detach()
        loss = -(torch.stack(log_probs) * advantage).sum() + F.smooth_l1_loss(values, returns, reduction="sum")
        opt.zero_grad()
        loss.backward()
        opt.step()
        if episode % 20 == 0:
            print(f"episode {episode}: {len(rewards)} moves, return {sum(rewards):.2f}")


if __name__ == "__main__":
    main()
