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


ZERO_CODE = """
def branches(rank, kwargs, args, epoch):
    if rank == 0:
        a()
    else:
        b()
    if dist.get_rank() != 0:
        c()
    if rank == 0 or epoch % 5 == 0:
        d()
    if "rank" not in kwargs or kwargs["rank"] == 0:
        e()
    if not args.distributed or args.local_rank in (-1, 0):
        f()
    if rank:
        g()
    if accelerator.is_main_process and epoch > 3:
        h()
    helper = rank > 0
    if helper:
        i()

def early(self):
    if not self.is_world_master():
        return
    j()

def early_wrong(local_rank):
    if local_rank <= 0:
        return
    k()
"""


def test_rank_zero_only_reads_which_ranks_take_a_branch():
    nav = indexed(ZERO_CODE)
    guards = RankGuards(nav, Bindings(nav, Budget()))
    only_zero = {name: guards.rank_zero_only(call_of(nav, name)) for name in "abcdefghijk"}
    assert only_zero == {"a": True, "b": False, "c": False, "d": False, "e": True, "f": True, "g": False,
                         "h": True, "i": False, "j": True, "k": False}
    # every one of them is still "some ranks only" for the rules that ask that
    assert all(guards.guarded(call_of(nav, name)) for name in "abcdefghijk")
