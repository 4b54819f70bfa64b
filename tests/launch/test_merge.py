"""Merging the ranks' findings: one per finding, with the ranks that saw it and the most telling message."""

from __future__ import annotations

from torchpact.launch.distributed import merge


def _finding(message: str, step: int | None, severity: str = "warning") -> dict:
    return {"code": "TP652", "category": "distributed", "severity": severity, "message": message,
            "path": "train.py", "line": 12, "subject": "DistributedDataParallel", "step": step}


def test_the_message_of_the_earliest_step_is_kept_whichever_rank_saw_it():
    docs = [
        {"rank": 1, "findings": [_finding("at the end of the run, 1 parameter differs", None)]},
        {"rank": 2, "findings": [_finding("at step 4, the gradients of 1 parameter differ", 4)]},
        {"rank": 3, "findings": [_finding("at step 8, 1 parameter differs", 8)]},
    ]
    (f,) = merge(docs)
    assert f.message == "at step 4, the gradients of 1 parameter differ" and f.step == 4
    assert f.extra["ranks"] == [1, 2, 3] and f.rank is None


def test_same_step_keeps_the_lowest_rank_unless_another_is_more_severe():
    docs = [{"rank": r, "findings": [_finding(f"rank {r}", 2, severity)]}
            for r, severity in ((1, "warning"), (2, "warning"))]
    assert merge(docs)[0].message == "rank 1"
    docs[1]["findings"][0]["severity"] = "error"
    assert merge(docs)[0].message == "rank 2"
