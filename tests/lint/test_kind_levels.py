"""The reason a finding quotes does not depend on the order a value's kinds were collected in.

A value's kinds can be gathered through a set, whose order of strings changes with each process's hash
seed; the same lint of the same file once quoted "holds a model output on some paths only" in one run and
"a graph-attached tensor" in the next (flair). Asking such a value whether it has any kind notes one reason.
"""

from __future__ import annotations

from torchpact.lint.kind_levels import MAY, Recorder, join, make, noted, of


def _noted_reason(levels: dict) -> list:
    recorder = Recorder()
    assert bool(noted(make(levels), recorder))
    return recorder.reasons


def test_the_reason_noted_for_a_yes_is_the_same_whatever_the_order_of_the_kinds():
    a, b = (MAY, "a model output on some paths"), (MAY, "a tensor on some paths")
    assert _noted_reason({"module_output": a, "tensor": b}) == _noted_reason({"tensor": b, "module_output": a})


def test_join_keeps_the_order_the_paths_name_the_kinds_in():
    joined = join([of(["tensor", "number"]), of(["number"])], "x")
    assert list(joined.levels) == ["tensor", "number"]
