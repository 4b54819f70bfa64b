"""What the other linted files of the project say about the functions a file calls (lint/project.py),
and which of those facts the file's rules asked for (so a cached result knows what it rests on)."""

from __future__ import annotations

import ast

from torchpact.lint.analysis.definitions import Definitions
from torchpact.lint.analysis.imports import Imports
from torchpact.lint.project import ProjectFacts


class ProjectQuestions:
    """The project's facts about the callees of one file, and the questions asked of them."""

    def __init__(self, project: ProjectFacts, imports: Imports, definitions: Definitions):
        self.project = project
        self._imports = imports
        self._definitions = definitions
        self.asked: set[tuple[str, str]] = set()  # (function, fact) questions rules asked the project

    def callee(self, call: ast.AST) -> str | None:
        """The bare name of a function another module of the project may define, for a call
        ``helper(...)`` or ``utils.helper(...)`` (an imported module); None for methods and for
        functions of this file (rules follow those themselves)."""
        if not isinstance(call, ast.Call):
            return None
        func = call.func
        if isinstance(func, ast.Name):
            return None if func.id in self._definitions.functions else func.id
        if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                and func.value.id in self._imports.aliases):
            return func.attr
        return None

    def calls_function_that(self, call: ast.AST, fact: str) -> bool:
        """Whether ``call`` runs a function of another linted file known to do ``fact``."""
        name = self.callee(call)
        if name is None:
            return False
        self.asked.add((name, fact))
        return self.project.has(name, fact)
