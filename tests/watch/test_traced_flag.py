"""``traced()`` holds inside every torch.func transform and nowhere else.

It asks the dispatch keys whether a functorch transform is active rather than peeking at the transform
stack: on torch 2.13 the peek creates the thread's functorch state, which every autograd node of every
later backward then copies (see ``watch.tracing``)."""

from __future__ import annotations

import torch
from torch.func import functionalize, grad, jacrev, vmap

from torchpact.watch.tracing import traced


def test_traced_inside_each_torch_func_transform_only():
    seen: list[bool] = []

    def f(x):
        seen.append(traced())
        return (x * 2).sum()

    vmap(f)(torch.ones(3, 2))
    grad(f)(torch.ones(3))
    jacrev(f)(torch.ones(3))
    functionalize(f)(torch.ones(3))
    assert seen == [True, True, True, True]
    f(torch.ones(2))
    with torch.no_grad():
        f(torch.ones(2))
    assert seen[4:] == [False, False]
