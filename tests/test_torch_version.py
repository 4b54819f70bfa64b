"""Version tests evaluated as Python would on a given torch (lint/torch_version.py)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from torchpact.lint.context import FileContext
from torchpact.lint.engine import index
from torchpact.lint.source import Source
from torchpact.lint.torch_version import UNKNOWN, evaluate

PRELUDE = """
import torch
import packaging.version
from packaging import version
from packaging.version import Version, parse as vparse
from pkg_resources import parse_version
TORCH_VER = tuple(int(x) for x in torch.__version__.split(".")[:2])
MAJOR_MINOR = tuple(map(int, torch.__version__.split("+")[0].split(".")[:2]))
PARSED = version.parse(torch.__version__)
IS_OLD = PARSED < version.parse("2.9")
"""

CASES = [
    # test, value on torch 2.13, value on torch 2.4
    ('torch.__version__ >= "2.9"', True, False),  # TorchVersion compares as a version, not as a string
    ("torch.__version__ < (2, 9)", False, True),
    ("TORCH_VER < (2, 9)", False, True),
    ("MAJOR_MINOR >= (2, 13)", True, False),
    ("IS_OLD", False, True),
    ("not IS_OLD", True, False),
    ('packaging.version.parse(torch.__version__) >= packaging.version.parse("2.6.0")', True, False),
    ('Version(torch.__version__).release >= (2, 6)', True, False),
    ('vparse(torch.__version__).minor > 10', True, False),
    ('parse_version(torch.__version__) == parse_version("2.13")', True, False),
    ('TORCH_VER >= (2, 0) and TORCH_VER < (2, 9)', False, True),
    ('TORCH_VER < (2, 0) or flag', UNKNOWN, UNKNOWN),
    ("flag < (2, 9)", UNKNOWN, UNKNOWN),
    ('hasattr(torch, "compile")', UNKNOWN, UNKNOWN),
]


def _context(text: str) -> FileContext:
    text = textwrap.dedent(text)
    ctx = FileContext(Source(path="m.py", text=text), ast.parse(text))
    index(ctx)
    return ctx


@pytest.mark.parametrize("test,new,old", CASES)
def test_version_tests_are_evaluated_for_the_torch_asked(test, new, old):
    ctx = _context(PRELUDE + f"value = {test}\n")
    expr = ctx.tree.body[-1].value  # type: ignore[attr-defined]
    for version, expected in (((2, 13), new), ((2, 4), old)):
        value = evaluate(expr, ctx, version)
        assert value is expected if expected is UNKNOWN else value == expected, (test, version)


VISION = frozenset({"torchvision.__version__"})


@pytest.mark.parametrize("test,new,old", [
    ('version.parse(torchvision.__version__) < version.parse("0.13")', False, True),
    ('tuple(int(x) for x in torchvision.__version__.split(".")[:2]) >= (0, 13)', True, False),
    ('torchvision.__version__ < "0.13"', False, False),  # a plain str: compared as a string ("0.9.0" > "0.13")
    ('torch.__version__ >= "2.9"', UNKNOWN, UNKNOWN),  # torch's version is not the one asked about
])
def test_another_package_version_is_evaluated_through_its_names(test, new, old):
    ctx = _context("import torch\nimport torchvision\nfrom packaging import version\n" + f"value = {test}\n")
    expr = ctx.tree.body[-1].value  # type: ignore[attr-defined]
    for version, expected in (((0, 28), new), ((0, 9), old)):
        value = evaluate(expr, ctx, version, names=VISION)
        assert value is expected if expected is UNKNOWN else value == expected, (test, version)
