"""ModeGuards alone: which nodes of a module's methods run only while ``self.training`` is True."""

from __future__ import annotations

import ast

from torchpact.lint.analysis.bindings import Bindings
from torchpact.lint.analysis.budget import Budget
from torchpact.lint.analysis.mode_guards import ModeGuards
from tests.lint._tree import call_of, indexed

CODE = """
class Net(Module):
    @property
    def active(self):
        return self.training and self.p > 0

    def _ready(self):
        if self.frozen:
            return False
        return self.training

    def _helper(self, x):
        return guarded_helper(x)

    def _loose(self, x):
        return loose_helper(x)

    def _recursive(self, x):
        if x:
            return self._recursive(recursive(x))
        return x

    @torch.jit.unused
    def _decorated(self, x):
        return decorated(x)

    def forward(self, x, flag):
        if self.training and self.p > 0:
            a()
        if not self.training:
            b()
        else:
            c()
        d() if self.training else e()
        self.training and f()
        self.training or g()
        if self.training is False:
            h()
        if self.training != False:
            i()
        on = self.training
        if on:
            j()
        if flag:
            k()
        if self.active:
            l()
        if self._ready():
            m()
        if self.training:
            x = self._helper(x)
        x = self._loose(x)
        self.keep = self._loose
        if self.training:
            self._decorated(x)
            fn = lambda t: in_lambda(t)
        xs = [comp(v) for v in x if self.training]
        match x:
            case [first, *_] if self.training and first:
                in_case()
            case _:
                other_case()
        for layer in self.layers:
            if not self.training:
                continue
            in_loop()
        if not self.training or self.p == 0:
            return x
        after_exit()

    def evaluate(me, x):
        assert me.training
        asserted()
        def nested(t):
            return in_nested(t)
        if me.training:
            nested(x)

    @staticmethod
    def static(x):
        if self.training:
            not_self()
"""

EXPECTED = {
    "a": True, "b": False, "c": True, "d": True, "e": False, "f": True, "g": False, "h": False, "i": True,
    "j": True, "k": False, "l": True, "m": True, "guarded_helper": True, "loose_helper": False,
    "recursive": False, "decorated": False, "in_lambda": False, "comp": True, "in_case": True,
    "other_case": False, "in_loop": True, "after_exit": True, "asserted": True, "in_nested": True, "not_self": False,
}


def test_what_runs_only_in_training_mode():
    nav = indexed(CODE)
    guards = ModeGuards(nav, Bindings(nav, Budget()))
    found = {name: guards.only_in_training(call_of(nav, name)) for name in EXPECTED}
    assert found == EXPECTED


def test_a_method_that_returns_false_or_the_mode_is_a_test_of_the_mode():
    # ``_ready()`` is true only through its ``return self.training``: its ``return False`` never is
    nav = indexed(CODE)
    guards = ModeGuards(nav, Bindings(nav, Budget()))
    test = next(n for n in nav.nodes(ast.If) if isinstance(n.test, ast.Call))
    assert guards.implies(test.test, True, test)
    assert not guards.implies(test.test, False, test)


def test_outside_a_class_nothing_is_guarded():
    nav = indexed("def f(self):\n    if self.training:\n        g()\n")
    guards = ModeGuards(nav, Bindings(nav, Budget()))
    assert not guards.only_in_training(call_of(nav, "g"))
