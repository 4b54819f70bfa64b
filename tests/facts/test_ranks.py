"""on_ranks: a real 2-rank gloo group; a rank killed below Python gets one more try, nothing else does."""

from __future__ import annotations

import os
import signal

import pytest

from torchpact.facts.ranks import RankError, on_ranks


def _sum_of_ranks(rank: int) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    return t.item()


def test_every_rank_returns_its_result_in_rank_order():
    assert on_ranks(_sum_of_ranks) == [3.0, 3.0]


def test_a_rank_killed_once_by_a_signal_is_retried(tmp_path, capsys):
    marker = tmp_path / "killed-once"

    def crash_first_time(rank: int) -> int:
        if rank == 0 and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return rank

    assert on_ranks(crash_first_time) == [0, 1]
    assert "retried once: rank 0 died without a result (killed by SIGKILL)" in capsys.readouterr().out


def test_a_rank_that_always_dies_fails_with_how_it_ended():
    def always_killed(rank: int) -> int:
        if rank == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        return rank

    with pytest.raises(RankError, match=r"rank 0 died without a result \(killed by SIGKILL\)"):
        on_ranks(always_killed)


def test_a_rank_that_raises_is_not_retried(tmp_path):
    calls = tmp_path / "calls"

    def raises(rank: int) -> int:
        if rank == 0:
            with open(calls, "a") as fh:
                fh.write("x")
            raise ValueError("broken experiment")
        return rank

    with pytest.raises(RankError, match="broken experiment"):
        on_ranks(raises)
    assert calls.read_text() == "x"
