"""``ctx.in_test``: what counts as test code (a test module, or a function pytest/unittest collects)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from torchpact.lint.context import FileContext
from torchpact.lint.source import Source
from tests.lint_helpers import codes

CODE = textwrap.dedent("""
    import unittest

    def test_a():
        def inner():
            CALL_1
    class TestB:
        def test_b(self):
            CALL_2
    class C(unittest.TestCase):
        def test_c(self):
            CALL_3
    def helper():
        CALL_4
    class D:
        def test_d(self):
            CALL_5
    def attest():
        CALL_6
""")


def _calls(path: str) -> dict[str, bool]:
    tree = ast.parse(CODE)
    ctx = FileContext(Source(path=path, text=CODE), tree)
    ctx.index()
    return {n.id: ctx.in_test(n) for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id.startswith("CALL_")}


def test_collected_test_functions_are_test_code():
    assert _calls("lib/module.py") == {"CALL_1": True, "CALL_2": True, "CALL_3": True, "CALL_4": False,
                                       "CALL_5": False, "CALL_6": False}


@pytest.mark.parametrize("path", ["tests/helpers.py", "pkg/test_x.py", "pkg/x_test.py", "conftest.py"])
def test_everything_in_a_test_module_is_test_code(path):
    assert set(_calls(path).values()) == {True}


def test_torchscript_in_a_test_helper_module_is_not_flagged():
    snippet = "import torch\ndef check(m, x):\n    fast = torch.jit.trace(m, x)\n    return fast(x)\n"
    assert codes(snippet, select=["TP755"], path="tests/helpers.py") == []
    assert codes(snippet, select=["TP755"], path="src/lib/helpers.py") == ["TP755"]
