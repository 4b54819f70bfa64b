"""The pieces of the ddp_* watchers that need no process group: checksums and stack reading."""

from __future__ import annotations

import sys

import torch

from torchpact.watch.watchers.ddp_common import bit_checksums, norms, plural
from torchpact.watch.watchers.ddp_hang import describe


def test_bit_checksums_see_one_ulp_and_ignore_reduction_order():
    torch.manual_seed(0)
    a = torch.randn(1000, 37)
    b = a.clone()
    b[123, 4] = torch.nextafter(b[123, 4], torch.tensor(10.0))  # one ulp away
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = bit_checksums([a, a.t(), a.half(), a.double(), None])
        torch.set_num_threads(max(2, threads))
        many = bit_checksums([a, a.t(), a.half(), a.double(), None])
    finally:
        torch.set_num_threads(threads)
    assert one == many and one[0] == one[1] and one[4] is None  # exact: the order of the sum does not matter
    assert bit_checksums([b])[0] != one[0]
    assert norms([a, None, torch.arange(3)])[1:] == [0.0, 0.0]


def test_describe_names_the_users_line_outside_any_collective():
    state = describe(sys._getframe())
    assert state["collective"] is None
    first_line = test_describe_names_the_users_line_outside_any_collective.__code__.co_firstlineno
    assert state["path"] == __file__ and state["line"] == first_line + 1


def test_plural():
    assert [plural(1, "batch"), plural(5, "batch"), plural(2, "parameter")] == ["1 batch", "5 batches", "2 parameters"]
