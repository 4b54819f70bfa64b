"""RankGuards alone: rank tests, flags bound from one, early rank exits, rank-named functions."""

from __future__ import annotations

from torchpact.lint.analysis.bindings import Bindings
from torchpact.lint.analysis.budget import Budget
from torchpact.lint.analysis.rank_guards import RankGuards, mentions_rank
from tests.lint._tree import call_of, indexed

CODE = """
def save(args, rank):
    if rank == 0:
        a()
    should_log = args.logs and is_master(args)
    if should_log:
        b()
    c()

def loop(rank):
    if rank != 0:
        return
    d()

def on_rank_zero_only():
    e()

def plain(flag):
    if flag:
        f()
"""


def test_guards_and_what_they_guard():
    nav = indexed(CODE)
    guards = RankGuards(nav, Bindings(nav, Budget()))
    guarded = {name: guards.guarded(call_of(nav, name)) for name in "abcdef"}
    assert guarded == {"a": True, "b": True, "c": False, "d": True, "e": True, "f": False}
    assert mentions_rank(call_of(nav, "is_master")) and not mentions_rank(call_of(nav, "f"))
