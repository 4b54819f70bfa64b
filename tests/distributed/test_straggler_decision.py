"""TP654's decision on synthetic per-rank medians: real step timings depend on the machine's load, so
the launch tests only check that a real straggler reaches the report; the thresholds are tested here."""

from __future__ import annotations

import pytest

from torchpact.watch.watchers.ddp_straggler import find_straggler


def _rank(data=0.001, forward=0.005, backward=0.010, optimizer=0.002, n=10):
    return {"data": data, "forward": forward, "backward": backward, "optimizer": optimizer,
            "total": data + forward + backward + optimizer, "n": n}


def test_the_rank_that_loads_data_slowly_is_named_with_its_phase():
    # rank 1 spends 40 ms loading; ranks 0 and 2 wait for it in backward (DDP's all-reduce)
    per_rank = [_rank(backward=0.050), _rank(data=0.041), _rank(backward=0.050)]
    excess, rank, phase, others = find_straggler(per_rank)
    assert (rank, phase) == (1, "data") and excess == pytest.approx(0.040) and others == pytest.approx(0.001)


def test_the_largest_excess_wins():
    per_rank = [_rank(forward=0.040, backward=0.0), _rank(optimizer=0.080, backward=0.0), _rank(backward=0.1)]
    assert find_straggler(per_rank)[1:3] == (1, "optimizer")


@pytest.mark.parametrize("slow", [
    _rank(data=0.009),                   # under 10 ms more per step
    _rank(data=0.0015, forward=0.0),     # twice the others, but 0.5 ms
    _rank(forward=0.009),                # 4 ms more (< 10 ms) and under twice the others' 5 ms
], ids=["small-excess", "tiny", "under-twice"])
def test_small_or_proportionate_differences_are_not_stragglers(slow):
    assert find_straggler([_rank(), slow, _rank()]) is None


def test_a_difference_that_is_a_small_share_of_a_long_step_is_not_a_straggler():
    long = {"backward": 1.0}
    # 15 ms more data loading in a ~1 s step: over 10 ms and twice the others, but under a quarter of the step
    assert find_straggler([_rank(**long), _rank(data=0.016, **long)]) is None
    assert find_straggler([_rank(**long), _rank(data=0.300, **long)])[1:3] == (1, "data")
