"""Finds every rule by walking ``torchpact.lint.rules``; nothing is registered by hand."""

from __future__ import annotations

import importlib
import pkgutil
import re
from functools import lru_cache
from pathlib import Path

from torchpact.lint.rule import CODE_PATTERN, Rule


class RegistryError(Exception):
    """Two rules share a code, or a rule is malformed; a bug in torchpact, caught by the tests."""


@lru_cache(maxsize=1)
def all_rules() -> tuple[type[Rule], ...]:
    """Every rule class, sorted by code."""
    import torchpact.lint.rules as package

    found: dict[str, type[Rule]] = {}
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if (isinstance(obj, type) and issubclass(obj, Rule) and obj is not Rule
                    and obj.__module__ == module.__name__ and "code" in vars(obj)):
                if not CODE_PATTERN.match(obj.code):
                    raise RegistryError(f"{obj.__qualname__}: bad code {obj.code!r}")
                if obj.code in found:
                    raise RegistryError(f"{obj.code} is used by {found[obj.code].__qualname__} and {obj.__qualname__}")
                found[obj.code] = obj
    return tuple(found[c] for c in sorted(found))


_CODE_LINE = re.compile(r'^    code = "(TP\d{3})"', re.M)


@lru_cache(maxsize=1)
def declared_codes() -> frozenset[str]:
    """The rules' codes read from their files' ``code = "TPnnn"`` lines, without importing them."""
    import torchpact.lint.rules as package

    codes = set()
    for folder in package.__path__:
        for path in Path(folder).rglob("*.py"):
            codes.update(_CODE_LINE.findall(path.read_text(encoding="utf-8")))
    return frozenset(codes)


def rule_by_code(code: str) -> type[Rule] | None:
    code = code.upper()
    return next((r for r in all_rules() if r.code == code), None)
