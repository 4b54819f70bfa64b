"""Definitions alone: this file's functions and classes, which are modules, and what calls reach."""

from __future__ import annotations

import ast

from torchpact.lint.analysis.bindings import Bindings
from torchpact.lint.analysis.budget import Budget
from torchpact.lint.analysis.definitions import Definitions
from torchpact.lint.analysis.imports import Imports
from tests.lint._tree import call_of, indexed, name_read

CODE = """
from torch import nn

class Base(nn.Module):
    def forward(self, x):
        return helper(x)

class Net(Base):
    pass

class Plain:
    def forward(self):
        pass

def helper(x):
    return deep(x)

def deep(x):
    return x.backward()

model = Net().to("cpu")
model
"""


def _defs():
    nav = indexed(CODE)
    names = Imports(nav)
    return nav, Definitions(nav, names, Bindings(nav, Budget()))


def test_module_classes_follow_local_bases_and_methods_are_inherited():
    nav, defs = _defs()
    assert set(defs.classes) == {"Base", "Net", "Plain"} and set(defs.module_classes) == {"Base", "Net"}
    assert defs.method(defs.classes["Net"], "forward").name == "forward"
    assert defs.method(defs.classes["Plain"], "missing") is None
    assert set(defs.functions) == {"forward", "helper", "deep"} and len(defs.functions["forward"]) == 2


def test_an_instance_is_told_through_module_returning_methods():
    nav, defs = _defs()
    assert defs.local_module_class(name_read(nav, "model")) is defs.classes["Net"]
    assert defs.local_module_class(call_of(nav, "helper")) is None


def test_reaches_follows_calls_to_this_files_functions_up_to_a_depth():
    nav, defs = _defs()
    forward = defs.method(defs.classes["Base"], "forward")

    def is_backward(node: ast.AST) -> bool:
        return isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "backward"

    assert defs.reaches([forward], is_backward) is call_of(nav, "backward")
    assert defs.reaches([forward], is_backward, depth=1) is None
