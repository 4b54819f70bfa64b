"""What one module call costs under torchpact on an unsampled step, next to an empty global hook pair.

Calls a parameter-free module many times and reports the added time per call for: an empty global
forward pre-hook + forward hook (``always_call=True``, as the session registers them), and a
torchpact session with the default watchers on a step that is not sampled. Target: torchpact within
1.5x of the empty pair. Best of many short rounds, process CPU time (on a shared machine a
short round is more likely to run undisturbed).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.modules.module as module_hooks

import torchpact
from torchpact.watch import Sampler


def per_call(model: nn.Module, x: torch.Tensor, calls: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(calls):
            model(x)
        best = min(best, time.process_time() - start)
    return best / calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=60)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, x = nn.Sequential(nn.Identity(), nn.Identity(), nn.Identity()), torch.zeros(1)
    calls = 4  # module calls per model call

    bare = per_call(model, x, args.calls, args.rounds)
    pre = module_hooks.register_module_forward_pre_hook(lambda m, a: None)
    post = module_hooks.register_module_forward_hook(lambda m, a, o: None, always_call=True)
    empty = per_call(model, x, args.calls, args.rounds)
    pre.remove()
    post.remove()

    weight = nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([weight], lr=0.0)
    with torchpact.watch(sampler=Sampler(first=1, every=10**9)) as session:
        weight.grad = torch.zeros(1)
        for _ in range(8):  # past step 0 (sampled), the first steps' loss-function mode, and settled routes
            model(x)
            opt.step()
        assert not session.sampled
        watched = per_call(model, x, args.calls, args.rounds)

    hook = (empty - bare) / calls * 1e9
    ours = (watched - bare) / calls * 1e9
    print(f"module call without hooks:        {bare / calls * 1e9:8.0f} ns")
    print(f"added by an empty global pair:    {hook:8.0f} ns")
    print(f"added by torchpact (unsampled):   {ours:8.0f} ns   ({ours / hook:.2f}x the empty pair; target <= 1.5x)")


if __name__ == "__main__":
    main()
