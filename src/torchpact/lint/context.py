"""What lint knows about one file, as rules ask it: a thin facade over the analyses of lint/analysis/.

Built once per file and shared by every rule, read-only. Everything is computed lazily, so a rule
that never asks about dataflow costs nothing for it. Each question is answered by one analysis, built
from the file and the analyses it needs (never from the context, so they form no reference cycle):

- ``navigation``: parents, scopes, loops, branches, the walks of a scope (analysis/navigation.py);
- ``names``: imports and what a name or call resolves to (analysis/imports.py);
- ``definitions``: this file's functions and classes (analysis/definitions.py);
- ``dataflow``: where a name is bound; a plain name's definitions are those that reach its read
  (analysis/bindings.py, lint/dataflow.py); attributes stay flow-insensitive;
- ``value_kinds``: what a value holds and how surely (lint/kinds.py), whose answers note the evidence
  of the current check into ``evidence`` (analysis/value_kinds.py);
- ``grad_mode``, ``rank_guards`` and ``mode_guards``: whether code records autograd, whether it runs on
  some ranks only, whether it runs only while its module is in training mode;
- ``project_questions``: facts other linted files give about the functions this one calls;
- ``budget``: the CPU time the current rule may still spend on the file.
"""

from __future__ import annotations

import ast
import re
from functools import cached_property
from typing import Callable, Iterator

from torchpact.config import Config
from torchpact.findings import Evidence
from torchpact.lint.analysis.backward import backward_names
from torchpact.lint.analysis.bindings import Binding, Bindings
from torchpact.lint.analysis.budget import Budget, BudgetExceeded
from torchpact.lint.analysis.definitions import Definitions, Function
from torchpact.lint.analysis.grad_mode import NO_GRAD_CONTEXTS, GradMode
from torchpact.lint.analysis.imports import Imports, canonical, dotted
from torchpact.lint.analysis.mode_guards import ModeGuards
from torchpact.lint.analysis.navigation import (
    COMPREHENSION_TYPES, FUNCTION_TYPES, LOOP_TYPES, SCOPE_TYPES, Navigation, walk_scope,
)
from torchpact.lint.analysis.project_facts import ProjectQuestions
from torchpact.lint.analysis.rank_guards import mentions_rank, RankGuards
from torchpact.lint.analysis.syntax import argument, is_const, keyword, keyword_is_true
from torchpact.lint.analysis.value_kinds import ValueKinds
from torchpact.lint.edits import Locator
from torchpact.lint.kinds import (  # noqa: F401 - the kinds and their tables, as rules import them from here
    BATCH, DDP, DDP_WRAPPERS, DIST_SAMPLER, FUNCTIONAL_LOSSES, GRAD_LEAF, GRAPH, GRAPH_CUTTING_METHODS,
    GRAPH_PRESERVING_METHODS, LOADER, LOSS, LOSS_FN, MODULE, MODULE_RETURNING_METHODS, MUST, NN_MODULE_BASES,
    NUMBER, OPTIMIZER, OUTPUT, PARAMETER_FREE_MODULES, SAMPLER, SCALER, SCHEDULER, TENSOR, Noted,
    is_torch_nn_class,
)
from torchpact.lint.project import ProjectFacts
from torchpact.lint.source import Source

__all__ = [
    "BudgetExceeded", "COMPREHENSION_TYPES", "FUNCTION_TYPES", "FileContext", "LOOP_TYPES", "NO_GRAD_CONTEXTS",
    "SCOPE_TYPES", "argument", "canonical", "dotted", "is_const", "keyword", "keyword_is_true", "mentions_rank",
]


class _ScopeWalk:
    """``FileContext.walk_scope``: the plain walk on the class, the once-per-root walk on a context."""

    def __init__(self, walk: Callable[..., Iterator[ast.AST]]):
        self.walk = walk
        self.__doc__ = walk.__doc__

    def __get__(self, ctx: FileContext | None, owner: type | None = None) -> Callable[..., Iterator[ast.AST]]:
        return self.walk if ctx is None else ctx.navigation.walk_scope_once


class FileContext:
    """Facts about one parsed file, shared by all rules. The questions below are the analyses' own
    methods, bound here so that rules ask ``ctx.parent(node)`` at the cost of a plain method call."""

    # navigation
    nodes: Callable[..., list[ast.AST]]
    parent: Callable[[ast.AST], ast.AST | None]
    ancestors: Callable[[ast.AST], Iterator[ast.AST]]
    statement: Callable[[ast.AST], ast.stmt | None]
    scope: Callable[[ast.AST], ast.AST]
    enclosing_class: Callable[[ast.AST], ast.ClassDef | None]
    enclosing_function: Callable[[ast.AST], Function | None]
    enclosing_loops: Callable[[ast.AST], list[ast.AST]]
    in_loop: Callable[[ast.AST], bool]
    conditional: Callable[..., bool]
    exclusive: Callable[[ast.AST, ast.AST], bool]
    walk_scope = _ScopeWalk(walk_scope)
    # names
    imports: Callable[[str], bool]
    resolve: Callable[[ast.AST | None], str | None]
    call_name: Callable[[ast.AST], str | None]
    is_call_to: Callable[..., bool]
    # definitions
    method: Callable[[ast.ClassDef, str], Function | None]
    local_module_class: Callable[[ast.AST], ast.ClassDef | None]
    makes_parameter_free: Callable[[ast.AST], bool]
    reaches: Callable[..., ast.AST | None]
    # dataflow
    assignments: Callable[[ast.AST], dict[str, list[Binding]]]
    flow: Callable[[ast.AST], object]
    bindings: Callable[[ast.AST], list[Binding]]
    values: Callable[[ast.AST], list[ast.AST]]
    # value kinds and evidence
    note: Callable[[Evidence, str], None]
    remember: Callable[[object, Callable[[], object]], object]
    unnoted: Callable[[Callable[[], object]], object]
    # grad mode, rank guards, project facts
    grad_mode_of_with: Callable[[ast.withitem], str | None]
    grad_disabled: Callable[[ast.AST], bool]
    function_disables_grad: Callable[[Function], bool]
    in_rank_guard: Callable[[ast.AST], bool]
    tests_rank: Callable[[ast.AST], bool]
    only_in_training: Callable[[ast.AST], bool]
    implies_training: Callable[[ast.AST, bool, ast.AST], bool]
    project_callee: Callable[[ast.AST], str | None]
    calls_project_function_that: Callable[[ast.AST, str], bool]
    # budget
    tick: Callable[[], None]
    start_budget: Callable[[float], None]
    out_of_time: Callable[[], bool]

    def __init__(self, source: Source, tree: ast.Module, config: Config | None = None,
                 project: ProjectFacts | None = None):
        self.source = source
        self.path = source.path
        self.tree = tree
        self.config = config or Config()
        self.lines = source.text.splitlines()
        # Per-file memo for rule helpers (keyed by the helper's name and the node it is about).
        self.memo: dict[object, object] = {}
        # Filled by ``index`` (the engine's single walk): every node of the file, grouped by type.
        self.by_type: dict[type, list[ast.AST]] = {}

        nav = self.navigation = Navigation(tree)
        self.nodes, self.parent, self.ancestors = nav.nodes, nav.parent, nav.ancestors
        self.statement, self.scope = nav.statement, nav.scope
        self.enclosing_class, self.enclosing_function = nav.enclosing_class, nav.enclosing_function
        self.enclosing_loops, self.in_loop = nav.enclosing_loops, nav.in_loop
        self.conditional, self.exclusive = nav.conditional, nav.exclusive

        names = self.names = Imports(nav)
        self.imports, self.resolve = names.imports, names.resolve
        self.call_name, self.is_call_to = names.call_name, names.is_call_to

        budget = self.budget = Budget()
        self.tick, self.start_budget, self.out_of_time = budget.tick, budget.start, budget.out_of_time

        flow = self.dataflow = Bindings(nav, budget)
        self.assignments, self.flow, self.bindings, self.values = (
            flow.assignments, flow.flow, flow.bindings, flow.values)

        defs = self.definitions = Definitions(nav, names, flow)
        self.method, self.local_module_class, self.reaches = defs.method, defs.local_module_class, defs.reaches
        self.makes_parameter_free = defs.makes_parameter_free

        kinds = self.value_kinds = ValueKinds(self.memo)
        # What the current rule's check relied on, and how surely (reset by the engine for each node).
        self.evidence = kinds.recorder
        self.note, self.remember, self.unnoted = kinds.note, kinds.remember, kinds.unnoted

        grad = self.grad_mode = GradMode(nav, names)
        self.grad_mode_of_with, self.grad_disabled = grad.of_with, grad.disabled
        self.function_disables_grad = grad.function_disables

        ranks = self.rank_guards = RankGuards(nav, flow)
        self.in_rank_guard, self.tests_rank = ranks.guarded, ranks.tests_rank
        modes = self.mode_guards = ModeGuards(nav, flow)
        self.only_in_training, self.implies_training = modes.only_in_training, modes.implies

        # Facts about the functions of every linted file (lint/project.py): helpers in other modules.
        self.project = project or ProjectFacts()
        questions = self.project_questions = ProjectQuestions(self.project, names, defs)
        self.asked = questions.asked  # (function, fact) questions rules asked the project
        self.project_callee, self.calls_project_function_that = questions.callee, questions.calls_function_that

    def index(self) -> None:
        """The single walk of the file: parents and a by-type index (``Navigation.index``)."""
        self.navigation.index()
        self.by_type = self.navigation.by_type

    @property
    def aliases(self) -> dict[str, str]:
        """Local name -> dotted origin, from every import in the file (any depth)."""
        return self.names.aliases

    @property
    def functions(self) -> dict[str, list[Function]]:
        """Functions and methods defined in the file, by bare name."""
        return self.definitions.functions

    @property
    def classes(self) -> dict[str, ast.ClassDef]:
        return self.definitions.classes

    @property
    def module_classes(self) -> dict[str, ast.ClassDef]:
        """Classes in this file that are nn.Modules (directly, or through another such class)."""
        return self.definitions.module_classes

    @cached_property
    def imports_torch(self) -> bool:
        return self.imports("torch")

    @cached_property
    def is_test_file(self) -> bool:
        """A pytest module: ``test_*.py``, ``*_test.py``, ``conftest.py``, or a file under ``tests/``."""
        parts = re.split(r"[\\/]", self.path)
        name = parts[-1]
        return (name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"
                or any(p in ("tests", "test", "testing") for p in parts[:-1]))

    def in_test(self, node: ast.AST) -> bool:
        """``node`` is test code: in a test module (``is_test_file``), or inside a function pytest or
        unittest collects as a test (``test*`` at module level, or a method of a ``Test*`` class or
        of a ``TestCase`` subclass), nested definitions included."""
        if self.is_test_file:
            return True
        for anc in self.ancestors(node):
            if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)) and anc.name.startswith("test"):
                owner = self.parent(anc)
                if isinstance(owner, ast.Module) or (isinstance(owner, ast.ClassDef) and (
                        owner.name.startswith("Test") or any(
                            (b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "")) == "TestCase"
                            for b in owner.bases))):
                    return True
        return False

    @cached_property
    def locator(self) -> Locator:
        return Locator(self.source.text)

    def kinds(self, expr: ast.AST | None, hints: bool = True) -> Noted:
        """What ``expr`` holds, as far as local dataflow can tell (the kind constants; lint/kinds.py).
        Each "yes" a rule gets from it notes how surely it holds into the evidence of its next hit."""
        return self.value_kinds.of(self, expr, hints)

    def backward_names(self, scope: ast.AST) -> frozenset[str]:
        """Names on which ``.backward()`` is called (directly or via ``scaler.scale(x)``) in ``scope``."""
        return backward_names(scope, self.navigation.walk_scope_once)

    def segment(self, node: ast.AST) -> str:
        # not ast.get_source_segment: it splits the whole file into lines on every call
        if getattr(node, "end_lineno", None) is None or getattr(node, "lineno", None) is None:
            return ""
        return self.locator.source(node)

