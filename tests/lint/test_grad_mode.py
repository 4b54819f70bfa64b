"""GradMode alone: blocks and decorators that switch autograd recording, resolved through imports."""

from __future__ import annotations

import ast

from torchpact.lint.analysis.grad_mode import GradMode
from torchpact.lint.analysis.imports import Imports
from tests.lint._tree import call_of, indexed

CODE = """
import torch
from torch import no_grad as ng

@ng()
def evaluate(model):
    a()

def train(model, flag):
    with torch.inference_mode():
        b()
        with torch.enable_grad():
            c()
    with torch.set_grad_enabled(False):
        d()
    with torch.set_grad_enabled(flag):
        e()
    with torch.inference_mode(False):
        f()
    g()
    with no_grad():  # not imported: unknown
        h()
"""


def test_each_block_and_decorator_is_read_in_its_function():
    nav = indexed(CODE)
    grad = GradMode(nav, Imports(nav))
    disabled = {name: grad.disabled(call_of(nav, name)) for name in "abcdefgh"}
    assert disabled == {"a": True, "b": True, "c": False, "d": True, "e": False, "f": False, "g": False,
                        "h": False}
    modes = [grad.of_with(item) for w in nav.nodes(ast.With) for item in w.items]
    assert modes == ["disabled", "enabled", "disabled", None, "enabled", None]
    assert grad.function_disables(nav.nodes(ast.FunctionDef)[0])
