"""An RL-style policy rolled out step by step: ~26 tiny module calls per time step, 50 per episode.

REINFORCE on a toy environment written in torch: every time step calls a small policy (an encoder of
residual blocks, a policy head and a value head); one optimizer step per episode.
"""

import os

import torch
import torch.nn as nn

torch.manual_seed(0)
torch.set_num_threads(int(os.environ.get("TP_BENCH_THREADS", "1")))
OBS, ACTIONS, HIDDEN, HORIZON = 6, 4, 32, 50


class Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc = nn.Linear(d, d)
        self.act = nn.Tanh()

    def forward(self, x):
        return x + self.act(self.fc(self.norm(x)))


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(OBS, HIDDEN)
        self.blocks = nn.Sequential(*(Block(HIDDEN) for _ in range(5)))
        self.pi = nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, ACTIONS))
        self.v = nn.Linear(HIDDEN, 1)

    def forward(self, obs):
        h = self.blocks(self.inp(obs))
        return self.pi(h), self.v(h)


policy = Policy()
opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
target = torch.randn(ACTIONS, OBS)
for _episode in range(int(os.environ.get("TP_BENCH_STEPS", "40"))):
    obs = torch.randn(1, OBS)
    log_probs, values, rewards = [], [], []
    for _t in range(HORIZON):
        logits, value = policy(obs)
        dist = torch.distributions.Categorical(logits=logits)
        action = dist.sample()
        log_probs.append(dist.log_prob(action))
        values.append(value.squeeze())
        rewards.append(-(obs - target[action]).pow(2).mean().detach())
        obs = 0.9 * obs + 0.1 * target[action] + 0.05 * torch.randn(1, OBS)
    returns, running = [], torch.zeros(())
    for r in reversed(rewards):
        running = r + 0.99 * running
        returns.append(running)
    returns = torch.stack(returns[::-1])
    values = torch.stack(values)
    advantage = returns - values.detach()
    loss = -(torch.stack(log_probs).squeeze(-1) * advantage).mean() + (returns - values).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"loss {loss.item():.6f}")
