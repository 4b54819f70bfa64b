"""Which steps run the expensive checks: the ``Sampler`` policy, and the ``Sampling`` of one run (its call
budget spent so far, the follow-ups watchers asked for)."""

from __future__ import annotations

from typing import Callable, NamedTuple, Union


class Sampler(NamedTuple):
    """Which steps run the expensive checks: every step at first, then every ``every``-th, and the step
    after a sampled one whenever a watcher asks for it (``Session.sample_next``): a check that saw
    something begin (a gradient norm jumping, an update far too large) confirms it on consecutive
    steps, while a healthy run pays for ``first`` steps and one in ``every``.

    ``every`` is 20, not 10: a periodic step's checks cost a tiny MLP's step 2.5 times its own work
    (0.88 ms on a 0.35 ms step, torch 2.13 CPU) and a small GPT's 6% (4.6 ms), and at one in 10 the
    periodic steps were 1.3% of a 300-step tiny script's whole run (start-up included) and 0.5% of
    a 120-step GPT's; at one in 20 a problem that begins mid-run is seen at most 20 steps late, and
    is then confirmed on consecutive steps as before. Long runs are spaced further by the budget.

    On a script of small modules the checks of a sampled step cost two to three times the step's own
    work (measured on torch 2.13 CPU: an RL rollout's sampled episode takes 2.4x a plain one), so a
    script with thousands of module calls per step would pay it many times over: sampled steps may
    also spend at most ``calls`` module calls, plus ``share`` of all the calls the script made (at
    that cost a 1% share keeps the long-run overhead of sampling near 3%). A sampled step's calls
    count against that budget, plus ``charge`` for the checks every sampled step makes whatever its
    calls (gradient norms, parameter snapshots: on a tiny MLP about 0.7 ms, the plain work of 12
    module calls of 59 us); a step the pattern picks is skipped while the budget cannot pay for it.
    Without the charge a model of 6 calls a step had 333 sampled steps for free and a 3000-step run
    of it paid 1.3x for sampling alone. Counted in calls, not seconds, so the choice is the same on
    every machine. ``calls=None`` lifts the budget.

    Past ``every * spread`` steps the periodic steps spread out as the run grows: the gap doubles each
    time the step count doubles (40 steps from step 200, 80 from 400, 160 from 800 at the defaults), so a
    problem that begins mid-run is seen at most 20 steps or a fifth of the steps run so far late, and then
    confirmed on consecutive steps as before. The periodic steps' checks cost a short-stepped model more
    than its own step (TextLSTM, 1.1 ms a step on torch 2.13 CPU: ~2 ms each), and at one in 20 its
    1000-step run spent a tenth of its training time on 49 of them; spread, 21. ``spread=None`` keeps one
    in ``every`` throughout.

    A ``NamedTuple`` for the reason ``Check`` is one: no ``exec`` at the start-up of every run.
    """

    first: int = 10
    every: int = 20
    calls: int | None = 2000
    share: float = 0.01
    charge: int = 12
    spread: int | None = 10

    def __call__(self, step: int) -> bool:
        return step < self.first or step % self.gap(step) == 0

    def periodic(self, step: int) -> bool:
        """Whether ``step`` is one of the periodic steps past the first ones."""
        return step >= self.first and step % self.gap(step) == 0

    def gap(self, step: int) -> int:
        """The distance between the periodic steps around ``step``: ``every``, doubled for each doubling of the
        step count past ``every * spread`` (an even ``spread`` keeps each band's first step a periodic one)."""
        every, spread = self.every, self.spread
        if spread is None or step < every * spread:
            return every
        return every << (step // (every * spread)).bit_length()

    def affordable(self, spent: int, done: int, steps: int) -> bool:
        """Whether one more sampled step fits at step ``steps``, after ``done`` sampled steps that made
        ``spent`` module calls."""
        if self.calls is None or done == 0:
            return True
        per_step = spent / done
        return spent + (done + 1) * self.charge + per_step <= self.calls + self.share * per_step * steps


#: A ``Sampler``, or a plain callable taken as the exact schedule (no budget, no follow-ups).
Schedule = Union[Sampler, Callable[[int], bool]]


class Sampling:
    """The sampling of one run: which step is sampled next, given the schedule, the module calls that sampled
    steps made (counted by the session, whose module hooks see them) and the follow-ups watchers asked for."""

    def __init__(self, sampler: Schedule) -> None:
        self.sampler = sampler
        self.steps_done = 0          # sampled steps over
        self.follow_up = False       # a watcher asked for the next step to be sampled too
        self.periodic = isinstance(sampler, Sampler) and sampler(0) and sampler.periodic(0)

    def next_step(self, step: int, was_sampled: bool, spent: int) -> bool:
        """The step before ``step`` is over (it was sampled or not, and sampled steps have made ``spent``
        module calls): whether ``step`` is sampled. Sets ``periodic`` for it."""
        if was_sampled:
            self.steps_done += 1
        follow_up, self.follow_up = self.follow_up, False
        sampled = self._choose(step, follow_up, spent, self.steps_done)
        # Whether this sampled step is only one of the sampler's periodic ones: past its first steps, and not
        # asked for by a watcher (a plain callable as sampler is an exact schedule: none is). A check that
        # costs much per sampled step and locates what cheaper checks detect on every step may skip them
        # (``nonfinite`` records modules on the other sampled steps only).
        sampler = self.sampler
        self.periodic = sampled and not follow_up and isinstance(sampler, Sampler) and sampler.periodic(step)
        return sampled

    def _choose(self, step: int, follow_up: bool, spent: int, done: int) -> bool:
        sampler = self.sampler
        if not (sampler(step) or (follow_up and isinstance(sampler, Sampler))):
            return False
        if not isinstance(sampler, Sampler) or not done:  # a plain callable has no budget
            return True
        return sampler.affordable(spent, done, step)

    def will_sample(self, step: int, current: int, sampled: bool, spent: int) -> bool:
        """Whether ``step`` (``current`` or the next one, which is ``sampled`` or not) is to be sampled, as far
        as can be told now."""
        if step == current:
            return sampled
        # Asked from a callback of this step, which ``next_step`` counts only once its callbacks are over:
        # counted here as it will be, or the first sampled step of a budget-bound script (an RL rollout)
        # would promise a second one that the budget then refuses.
        return self._choose(step, self.follow_up and step == current + 1, spent,
                            self.steps_done + (1 if sampled else 0))
