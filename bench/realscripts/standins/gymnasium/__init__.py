"""Stand-in for gymnasium: ``make("CartPole-v1")`` only, a cart-pole written here from the equations of
motion of a pole hinged on a frictionless cart (Barto, Sutton & Anderson, 1983; derived in Florian,
2007), integrated with semi-implicit Euler steps.

The task's constants are those CartPole-v1 is defined by (g = 9.8, cart 1.0 kg, pole 0.1 kg, pole
half-length 0.5 m, push 10 N, 0.02 s per step; the episode ends past 2.4 m or 12 degrees, or after
500 steps). ``spec.reward_threshold`` is 475 as registered upstream, or ``STANDIN_REWARD_THRESHOLD``
when set (the bench stops REINFORCE / actor-critic at a lower running reward to keep them short).
"""

from __future__ import annotations

import math
import os
from types import SimpleNamespace

import numpy as np

GRAVITY, CART_MASS, POLE_MASS, HALF_LENGTH, PUSH, DT = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
MAX_OFFSET, MAX_TILT, MAX_STEPS = 2.4, math.radians(12), 500


def accelerations(tilt: float, spin: float, force: float) -> tuple[float, float]:
    """(cart acceleration, angular acceleration of the pole) for a frictionless cart-pole."""
    total = CART_MASS + POLE_MASS
    sin, cos = math.sin(tilt), math.cos(tilt)
    push_term = (force + POLE_MASS * HALF_LENGTH * spin * spin * sin) / total
    angular = (GRAVITY * sin - cos * push_term) / (HALF_LENGTH * (4.0 / 3.0 - POLE_MASS * cos * cos / total))
    linear = push_term - POLE_MASS * HALF_LENGTH * angular * cos / total
    return linear, angular


class CartPole:
    def __init__(self, render_mode=None):
        threshold = float(os.environ.get("STANDIN_REWARD_THRESHOLD", "475"))
        self.spec = SimpleNamespace(id="CartPole-v1", reward_threshold=threshold, max_episode_steps=MAX_STEPS)
        self.render_mode = render_mode
        self._rng = np.random.default_rng()
        self._state = np.zeros(4)
        self._steps = 0

    def reset(self, seed=None, options=None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._state = self._rng.uniform(-0.05, 0.05, size=4)
        self._steps = 0
        return self._state.astype(np.float32), {}

    def step(self, action):
        offset, speed, tilt, spin = self._state
        linear, angular = accelerations(tilt, spin, PUSH if int(action) == 1 else -PUSH)
        speed, spin = speed + DT * linear, spin + DT * angular      # velocities first (semi-implicit)
        offset, tilt = offset + DT * speed, tilt + DT * spin
        self._state = np.array([offset, speed, tilt, spin])
        self._steps += 1
        fallen = abs(offset) > MAX_OFFSET or abs(tilt) > MAX_TILT
        return self._state.astype(np.float32), 1.0, bool(fallen), self._steps >= MAX_STEPS, {}

    def render(self):
        return None

    def close(self):
        return None


def make(env_id, **kwargs):
    if env_id != "CartPole-v1":
        raise ValueError(f"the gymnasium stand-in has CartPole-v1 only, not {env_id!r}")
    return CartPole(render_mode=kwargs.get("render_mode"))
