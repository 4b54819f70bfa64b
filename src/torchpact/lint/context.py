"""What lint knows about one file: imports, parents, scopes and a light local dataflow.

Built once per file and shared by every rule, read-only. Everything is computed lazily, so a rule
that never asks about dataflow costs nothing for it. A plain name's definitions are those that reach
its read (lint/dataflow.py); attributes stay flow-insensitive. What a value holds, and how surely, is
``kinds`` (lint/kinds.py), whose answers note the evidence of the current check into ``evidence``.
"""

from __future__ import annotations

import ast
import re
import time
from functools import cached_property
from typing import Callable, Iterable, Iterator

from torchpact.config import Config
from torchpact.findings import Evidence
from torchpact.lint.dataflow import ScopeFlow, _Iterated, _Unpacked
from torchpact.lint.edits import Locator
from torchpact.lint.kinds import (  # noqa: F401 - the kinds and their tables, as rules import them from here
    BATCH, DDP, DDP_WRAPPERS, DIST_SAMPLER, FUNCTIONAL_LOSSES, GRAD_LEAF, GRAPH, GRAPH_CUTTING_METHODS,
    GRAPH_PRESERVING_METHODS, LOADER, LOSS, LOSS_FN, MODULE, MODULE_RETURNING_METHODS, MUST, NN_MODULE_BASES,
    NUMBER, OPTIMIZER, OUTPUT, PARAMETER_FREE_MODULES, SAMPLER, SCALER, SCHEDULER, TENSOR, Kinds, Noted,
    Recorder, is_torch_nn_class, kinds_of, noted,
)
from torchpact.lint.project import ProjectFacts
from torchpact.lint.source import Source

FUNCTION_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
SCOPE_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.Module)
LOOP_TYPES = (ast.For, ast.AsyncFor, ast.While)
_NESTED_SCOPES = frozenset({*FUNCTION_TYPES, ast.ClassDef})
_BINDERS = frozenset({ast.Assign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.withitem, ast.NamedExpr})
COMPREHENSION_TYPES = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)

_RANK_WORDS = re.compile(
    r"(^|_)(rank|local_rank|global_rank|node_rank|is_main_process|is_local_main_process|"
    r"is_world_process_zero|is_local_process_zero|is_global_zero|is_master|master_process|"
    r"is_main|main_process|is_rank_zero|rank_zero|rank0|is_primary|should_save)($|_)",
    re.I,
)


class BudgetExceeded(Exception):
    """A rule's analysis of one file ran past its time budget."""


def dotted(parts: Iterable[str]) -> str:
    return ".".join(parts)


class _ScopeWalk:
    """``FileContext.walk_scope``: the plain walk on the class, the once-per-root walk on a context.
    A method looked up on each use rather than stored on the instance, where it would make a
    reference cycle that keeps the context and its tree alive until the cyclic GC runs."""

    def __init__(self, walk: Callable[..., Iterator[ast.AST]]):
        self.walk = walk
        self.__doc__ = walk.__doc__

    def __get__(self, ctx: FileContext | None, owner: type | None = None) -> Callable[..., Iterator[ast.AST]]:
        return self.walk if ctx is None else ctx._walk_scope_once


class FileContext:
    """Facts about one parsed file, shared by all rules."""

    def __init__(self, source: Source, tree: ast.Module, config: Config | None = None,
                 project: ProjectFacts | None = None):
        self.source = source
        # Facts about the functions of every linted file (lint/project.py): helpers in other modules.
        self.project = project or ProjectFacts()
        self.asked: set[tuple[str, str]] = set()  # (function, fact) questions rules asked the project
        self.path = source.path
        self.tree = tree
        self.config = config or Config()
        self.lines = source.text.splitlines()
        # id(child) -> parent. A dict, not an attribute on the node, so trees have no reference
        # cycles and are freed as soon as the file is done, without the cyclic GC.
        self._parents: dict[int, ast.AST] = {}
        self._assign_cache: dict[int, dict[str, list[tuple[ast.AST, ast.AST | None]]]] = {}
        self._kinds_active: set[tuple[int, bool]] = set()
        self._kinds_memo: dict[tuple[int, bool], Kinds] = {}
        self._kinds_noted: dict[tuple[int, bool], Noted] = {}
        # What the current rule's check relied on, and how surely (reset by the engine for each node).
        self.evidence = Recorder()
        self._flows: dict[int, ScopeFlow] = {}
        self._call_names: dict[int, str | None] = {}
        self._module_class_memo: dict[int, ast.ClassDef | None] = {}
        self._imports: dict[str, bool] = {}
        # Per-file memo for rule helpers (keyed by the helper's name and the node it is about).
        self.memo: dict[object, object] = {}
        # Set by the engine before each rule: past it, the analysis raises BudgetExceeded.
        self.deadline: float | None = None
        self._wall_check = 0.0
        self._ticks = 0
        # Filled by the engine's single walk: every node of the file, grouped by type.
        self.by_type: dict[type, list[ast.AST]] = {}
        # ``ctx.walk_scope`` walks each root once per file (the analyses and rules walk the same
        # function bodies again and again); ``FileContext.walk_scope`` stays the plain walk.
        self._walks: dict[object, tuple[object, list[ast.AST]]] = {}

    def nodes(self, *types: type) -> list[ast.AST]:
        """All nodes of these types in the file, in walk order."""
        if len(types) == 1:
            return self.by_type.get(types[0], [])
        return [n for t in types for n in self.by_type.get(t, [])]

    @cached_property
    def locator(self) -> Locator:
        return Locator(self.source.text)

    # ------------------------------------------------------------------ structure
    def parent(self, node: ast.AST) -> ast.AST | None:
        return self._parents.get(id(node))

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        parents = self._parents
        p = parents.get(id(node))
        while p is not None:
            yield p
            p = parents.get(id(p))

    def statement(self, node: ast.AST) -> ast.stmt | None:
        """The statement that contains ``node`` (itself when it is one)."""
        cur: ast.AST | None = node
        while cur is not None and not isinstance(cur, ast.stmt):
            cur = self.parent(cur)
        return cur  # type: ignore[return-value]

    def scope(self, node: ast.AST) -> ast.AST:
        """Nearest enclosing function (or lambda), else the module."""
        for anc in self.ancestors(node):
            if isinstance(anc, SCOPE_TYPES):
                return anc
        return self.tree

    def enclosing_class(self, node: ast.AST) -> ast.ClassDef | None:
        for anc in self.ancestors(node):
            if isinstance(anc, ast.ClassDef):
                return anc
        return None

    def enclosing_function(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        for anc in self.ancestors(node):
            if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return anc
        return None

    def enclosing_loops(self, node: ast.AST) -> list[ast.AST]:
        """Loops around ``node`` in its own function, innermost first (comprehensions excluded)."""
        loops = []
        child = node
        for anc in self.ancestors(node):
            if isinstance(anc, FUNCTION_TYPES):
                break
            # the iterable of a for loop runs once, not per iteration
            if isinstance(anc, LOOP_TYPES) and not (isinstance(anc, (ast.For, ast.AsyncFor)) and child is anc.iter):
                if child not in getattr(anc, "orelse", []):
                    loops.append(anc)
            child = anc
        return loops

    def in_loop(self, node: ast.AST) -> bool:
        return bool(self.enclosing_loops(node))

    def conditional(self, node: ast.AST, within: ast.AST | None = None) -> bool:
        """Whether ``node`` runs on some paths only of ``within`` (default: its function or module):
        under an ``if`` branch, a conditional expression's side, an ``except`` / ``else`` of a ``try``,
        a ``match`` case, or the right of ``and`` / ``or``. Loop bodies count as run."""
        child = node
        for anc in self.ancestors(node):
            if anc is within or isinstance(anc, SCOPE_TYPES):
                return False
            t = type(anc)
            if t is ast.If or t is ast.IfExp:
                if child is not anc.test:  # type: ignore[attr-defined]
                    return True
            elif t is ast.Try or t is ast.ExceptHandler or t is ast.match_case:
                if t is not ast.Try or child not in anc.body and child not in anc.finalbody:  # type: ignore[attr-defined]
                    return True
            elif t is ast.BoolOp and child is not anc.values[0]:  # type: ignore[attr-defined]
                return True
            child = anc
        return False

    def exclusive(self, a: ast.AST, b: ast.AST) -> bool:
        """Whether ``a`` and ``b`` sit in different branches of one ``if`` (or conditional expression):
        one pass through the code never runs both."""
        path_a = {}
        child = a
        for anc in self.ancestors(a):
            path_a[id(anc)] = child
            child = anc
        child = b
        for anc in self.ancestors(b):
            child_a = path_a.get(id(anc))
            if child_a is not None:
                if isinstance(anc, (ast.If, ast.IfExp)):
                    return _branch(anc, child_a) != _branch(anc, child)
                return False
            child = anc
        return False

    @_ScopeWalk
    def walk_scope(root: ast.AST | list[ast.stmt]) -> Iterator[ast.AST]:
        """Nodes under ``root`` (statements, or a node), not entering nested functions or classes."""
        stack: list[ast.AST] = list(reversed(root)) if isinstance(root, list) else [root]
        first = None if isinstance(root, list) else root
        # ast.iter_child_nodes inlined (hot: most analyses walk a scope); the Load/Store/Del markers
        # are skipped, as no analysis asks for them.
        AST, CONTEXT, pop, push = ast.AST, ast.expr_context, stack.pop, stack.append
        while stack:
            node = pop()
            yield node
            if node is not first and type(node) in _NESTED_SCOPES:
                continue
            children = []
            for name in node._fields:
                value = getattr(node, name, None)
                if type(value) is list:
                    children += [item for item in value if isinstance(item, AST)]
                elif isinstance(value, AST) and not isinstance(value, CONTEXT):
                    children.append(value)
            while children:
                push(children.pop())

    def _walk_scope_once(self, root: ast.AST | list[ast.stmt]) -> Iterator[ast.AST]:
        key: object = tuple(map(id, root)) if isinstance(root, list) else id(root)
        walked = self._walks.get(key)
        if walked is None:
            # the entry holds the root (or its statements), so their ids cannot be reused by others
            walked = self._walks[key] = (tuple(root) if isinstance(root, list) else root,
                                         list(FileContext.walk_scope(root)))
        return iter(walked[1])

    # ------------------------------------------------------------------ names
    @cached_property
    def aliases(self) -> dict[str, str]:
        """Local name -> dotted origin, from every import in the file (any depth)."""
        out: dict[str, str] = {}
        for node in self.nodes(ast.Import, ast.ImportFrom):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        out[a.asname] = a.name
                    else:
                        top = a.name.split(".")[0]
                        out.setdefault(top, top)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    if a.name != "*":
                        out[a.asname or a.name] = f"{node.module}.{a.name}"
        return out

    @cached_property
    def is_test_file(self) -> bool:
        """A pytest module: ``test_*.py``, ``*_test.py``, ``conftest.py``, or a file under ``tests/``."""
        parts = re.split(r"[\\/]", self.path)
        name = parts[-1]
        return (name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"
                or any(p in ("tests", "test", "testing") for p in parts[:-1]))

    @cached_property
    def imports_torch(self) -> bool:
        return self.imports("torch")

    def imports(self, package: str) -> bool:
        """Whether the file imports ``package`` or one of its modules (anywhere in it)."""
        found = self._imports.get(package)
        if found is None:
            dot = package + "."
            found = self._imports[package] = any(v == package or v.startswith(dot) for v in self.aliases.values())
        return found

    def resolve(self, expr: ast.AST | None) -> str | None:
        """Dotted origin of a name or attribute chain: ``nn.Linear`` -> ``torch.nn.Linear``."""
        parts: list[str] = []
        cur = expr
        while isinstance(cur, ast.Attribute):
            parts.append(cur.attr)
            cur = cur.value
        if not isinstance(cur, ast.Name):
            return None
        base = self.aliases.get(cur.id)
        if base is None:
            return None
        parts.append(base)
        return canonical(dotted(reversed(parts)))

    def call_name(self, call: ast.AST) -> str | None:
        """``resolve`` of a call's callee; memoised, since most rules ask it of every call."""
        if not isinstance(call, ast.Call):
            return None
        key = id(call)
        memo = self._call_names
        if key in memo:
            return memo[key]
        name = memo[key] = self.resolve(call.func)
        return name

    def is_call_to(self, node: ast.AST, *names: str) -> bool:
        qn = self.call_name(node)
        return qn is not None and qn in names

    # ------------------------------------------------------------------ local definitions
    @cached_property
    def functions(self) -> dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]]:
        """Functions and methods defined in the file, by bare name."""
        out: dict[str, list] = {}
        for node in self.nodes(ast.FunctionDef, ast.AsyncFunctionDef):
            out.setdefault(node.name, []).append(node)
        return out

    @cached_property
    def classes(self) -> dict[str, ast.ClassDef]:
        return {n.name: n for n in self.nodes(ast.ClassDef)}

    @cached_property
    def module_classes(self) -> dict[str, ast.ClassDef]:
        """Classes in this file that are nn.Modules (directly, or through another such class)."""
        found: dict[str, ast.ClassDef] = {}
        changed = True
        while changed:
            changed = False
            for name, cls in self.classes.items():
                if name in found:
                    continue
                for base in cls.bases:
                    qn = self.resolve(base)
                    local = base.id if isinstance(base, ast.Name) else None
                    if (qn and (qn in NN_MODULE_BASES or is_torch_nn_class(qn))) or (local in found):
                        found[name] = cls
                        changed = True
                        break
        return found

    def method(self, cls: ast.ClassDef, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                return stmt
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in self.classes and base.id != cls.name:
                found = self.method(self.classes[base.id], name)
                if found is not None:
                    return found
        return None

    def local_module_class(self, expr: ast.AST) -> ast.ClassDef | None:
        """The local nn.Module class an expression is an instance of, when it can be told."""
        key = id(expr)
        if key in self._module_class_memo:
            return self._module_class_memo[key]  # None while in progress: ``model = model.to(rank)``
        self._module_class_memo[key] = None
        found = None
        for value in self.values(expr):
            if isinstance(value, ast.Call):
                func = value.func
                if isinstance(func, ast.Name) and func.id in self.module_classes:
                    found = self.module_classes[func.id]
                elif isinstance(func, ast.Attribute) and func.attr in MODULE_RETURNING_METHODS:
                    found = self.local_module_class(func.value)
                if found is not None:
                    break
        self._module_class_memo[key] = found
        return found

    # ------------------------------------------------------------------ dataflow
    def assignments(self, scope: ast.AST) -> dict[str, list[tuple[ast.AST, ast.AST | None]]]:
        """Name -> [(binding node, value or None)] for every binding in ``scope`` (not nested ones)."""
        key = id(scope)
        cached = self._assign_cache.get(key)
        if cached is not None:
            return cached
        table: dict[str, list[tuple[ast.AST, ast.AST | None]]] = {}

        def bind(target: ast.AST, owner: ast.AST, value: ast.AST | None) -> None:
            if isinstance(target, ast.Name):
                table.setdefault(target.id, []).append((owner, value))
            elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                table.setdefault(f"{target.value.id}.{target.attr}", []).append((owner, value))
            elif isinstance(target, (ast.Tuple, ast.List)):
                elts = target.elts
                vals = value.elts if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(elts) else None
                for i, elt in enumerate(elts):
                    if isinstance(elt, ast.Starred):
                        elt = elt.value
                    bind(elt, owner, vals[i] if vals else _Unpacked(value) if value is not None else None)

        if isinstance(scope, FUNCTION_TYPES):
            args = scope.args
            for a in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                      *([args.vararg] if args.vararg else []), *([args.kwarg] if args.kwarg else [])]:
                table.setdefault(a.arg, []).append((a, None))
            body: ast.AST | list = scope.body if isinstance(scope.body, list) else [scope.body]
        else:
            body = scope.body  # type: ignore[attr-defined]
        for node in self.walk_scope(body):
            if type(node) not in _BINDERS:
                continue  # most nodes: one set lookup instead of five isinstance tests
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    bind(t, node, node.value)
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                bind(node.target, node, node.value)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                bind(node.target, node, _Iterated(node.iter))
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                bind(node.optional_vars, node, node.context_expr)
            elif isinstance(node, ast.NamedExpr):
                bind(node.target, node, node.value)
        self._assign_cache[key] = table
        return table

    def flow(self, scope: ast.AST) -> ScopeFlow:
        """Reaching definitions of the plain names of ``scope`` (built once per scope)."""
        flow = self._flows.get(id(scope))
        if flow is None:
            self.tick()
            flow = self._flows[id(scope)] = ScopeFlow(scope)
        return flow

    def bindings(self, expr: ast.AST) -> list[tuple[ast.AST, ast.AST | None]]:
        """Where the name (or ``obj.attr``) in ``expr`` is bound.

        A plain name read in a function or the module gets the definitions that reach that read
        (flow-sensitive); a name the scope never binds, and ``obj.attr``, get every binding in the
        scope, then the class's methods (``self.x``), then the module.
        """
        if isinstance(expr, ast.Name):
            key = expr.id
            scope = self.scope(expr)
            flow = self.flow(scope)
            reaching = flow.reaching(expr)
            if reaching is not None and (reaching or key in flow.local_names):
                return reaching
        elif isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            key = f"{expr.value.id}.{expr.attr}"
        else:
            return []
        scope = self.scope(expr)
        found = self.assignments(scope).get(key, [])
        if not found and key.startswith("self.") and (cls := self.enclosing_class(expr)) is not None:
            found = []
            for stmt in cls.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.extend(self.assignments(stmt).get(key, []))
        if not found and scope is not self.tree:
            found = self.assignments(self.tree).get(key, [])
        return found

    def values(self, expr: ast.AST) -> list[ast.AST]:
        """The expression itself, or the values assigned to the name it is."""
        if isinstance(expr, (ast.Name, ast.Attribute)):
            vals = [v for _, v in self.bindings(expr) if v is not None]
            if vals:
                return vals
        return [expr]

    def kinds(self, expr: ast.AST | None, hints: bool = True) -> Noted:
        """What ``expr`` holds, as far as local dataflow can tell (the kind constants; lint/kinds.py).
        Each "yes" a rule gets from it notes how surely it holds into the evidence of its next hit."""
        key = (id(expr), hints)
        found = self._kinds_noted.get(key)
        if found is None:
            found = self._kinds_noted[key] = noted(kinds_of(self, expr, hints), self.evidence)
        return found

    def note(self, evidence: Evidence, reason: str) -> None:
        """Weaken the evidence of the current check's next hits to ``evidence``, saying why: for what
        the rule relies on and the kinds analysis cannot see (a callee defined elsewhere that may
        zero the gradients, a value from an unresolved call)."""
        self.evidence.note(evidence.rank, reason)

    def remember(self, key: object, compute: Callable[[], object]) -> object:
        """``compute()`` once per file under ``key`` in ``memo``; the evidence noted while computing it
        is noted again on every later use, so a memoised fact weakens each hit that relies on it."""
        entry = self.memo.get(key)
        rec = self.evidence
        if entry is None:
            level, reasons = rec.level, rec.reasons
            rec.reset()
            try:
                value = compute()
            finally:
                got = (rec.level, tuple(rec.reasons))
                rec.level, rec.reasons = level, reasons
            entry = self.memo[key] = (value, *got)
        value, level, reasons = entry  # type: ignore[misc]
        if level < MUST:
            for why in reasons or (None,):
                rec.note(level, why)
        return value

    def unnoted(self, compute: Callable[[], object]) -> object:
        """``compute()`` with whatever it notes discarded: for a question whose answer cannot make a
        finding less sure (whether a loop binds its model anew asks what the model is, but a finding
        made when it does not rests on the binding, not on the model's kind)."""
        rec = self.evidence
        level, reasons = rec.level, rec.reasons
        rec.reasons = []
        try:
            return compute()
        finally:
            rec.level, rec.reasons = level, reasons

    def tick(self) -> None:
        """Raise BudgetExceeded once the current rule is past its time on this file."""
        self._ticks += 1
        if not self._ticks & 63 and self.out_of_time():
            raise BudgetExceeded

    def start_budget(self, seconds: float) -> None:
        """Give the next rule ``seconds`` of CPU time on this file."""
        self.deadline = time.process_time() + seconds
        self._wall_check = time.perf_counter() + seconds

    def out_of_time(self) -> bool:
        """Past the CPU budget. The CPU clock is a system call, so it is read only once the cheap wall
        clock has passed the budget (CPU time never runs ahead of wall time in one thread)."""
        if self.deadline is None or time.perf_counter() < self._wall_check:
            return False
        left = self.deadline - time.process_time()
        self._wall_check = time.perf_counter() + max(left, 0.01)
        return left < 0

    def backward_names(self, scope: ast.AST) -> frozenset[str]:
        """Names on which ``.backward()`` is called (directly or via ``scaler.scale(x)``) in ``scope``."""
        cache = getattr(scope, "tp_backward_names", None)
        if cache is not None:
            return cache
        names = set()
        for node in self.walk_scope(scope.body if isinstance(getattr(scope, "body", None), list) else [scope]):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr in ("backward", "manual_backward") and node.args and _is_backward_helper(node):
                # accelerator.backward(loss), fabric.backward(loss), self.manual_backward(loss)
                target = node.args[0]
                if isinstance(target, ast.Name):
                    names.add(target.id)
                elif isinstance(target, ast.Attribute):
                    names.add(target.attr)
                continue
            if node.func.attr == "backward":
                target = node.func.value
                if (isinstance(target, ast.Call) and isinstance(target.func, ast.Attribute)
                        and target.func.attr == "scale" and target.args):
                    target = target.args[0]
                if isinstance(target, ast.Name):
                    names.add(target.id)
                elif isinstance(target, ast.Attribute):
                    names.add(target.attr)
        result = frozenset(names)
        scope.tp_backward_names = result  # type: ignore[attr-defined]
        return result

    # ------------------------------------------------------------------ regions
    def grad_mode_of_with(self, item: ast.withitem) -> str | None:
        """'disabled' / 'enabled' when a with-item switches grad mode, else None."""
        expr = item.context_expr
        qn = self.call_name(expr) if isinstance(expr, ast.Call) else self.resolve(expr)
        if qn in NO_GRAD_CONTEXTS:
            if (qn.endswith("inference_mode") and isinstance(expr, ast.Call) and expr.args
                    and is_const(expr.args[0], False)):
                return "enabled"
            return "disabled"
        if qn in ("torch.set_grad_enabled", "torch.autograd.set_grad_enabled") and isinstance(expr, ast.Call):
            if expr.args and is_const(expr.args[0], False):
                return "disabled"
            if expr.args and is_const(expr.args[0], True):
                return "enabled"
            return None
        if qn in ("torch.enable_grad", "torch.autograd.enable_grad"):
            return "enabled"
        return None

    def grad_disabled(self, node: ast.AST) -> bool:
        """Whether ``node`` runs under no_grad / inference_mode (block or decorator) in its function."""
        child = node
        for anc in self.ancestors(node):
            if isinstance(anc, (ast.With, ast.AsyncWith)) and child not in anc.items:
                for item in anc.items:
                    mode = self.grad_mode_of_with(item)
                    if mode is not None:
                        return mode == "disabled"
            if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return self.function_disables_grad(anc)
            if isinstance(anc, ast.Lambda):
                return False
            child = anc
        return False

    def function_disables_grad(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        for dec in fn.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            if self.resolve(target) in NO_GRAD_CONTEXTS:
                return True
        return False

    def in_rank_guard(self, node: ast.AST) -> bool:
        """Whether ``node`` only runs on some ranks: under a rank test, or after an early rank exit."""
        child = node
        for anc in self.ancestors(node):
            if isinstance(anc, (ast.If, ast.IfExp)) and child is not anc.test and self.tests_rank(anc.test):
                return True
            if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if any(mentions_rank(d) for d in anc.decorator_list):
                    return True
                if anc.name and _RANK_WORDS.search(anc.name):
                    return True
            body = getattr(anc, "body", None)
            if isinstance(body, list) and child in body:
                for stmt in body[: body.index(child)]:
                    if isinstance(stmt, ast.If) and _exits(stmt.body) and self.tests_rank(stmt.test):
                        return True
            child = anc
        return False

    def tests_rank(self, test: ast.AST) -> bool:
        """Whether a condition depends on the rank: it names one, or a flag bound from one
        (``args.save_logs = args.logs and is_master(args)`` ... ``if args.save_logs:``)."""
        if mentions_rank(test):
            return True
        for node in ast.walk(test):
            if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(getattr(node, "ctx", None), ast.Load):
                if any(v is not None and mentions_rank(v) for _, v in self.bindings(node)):
                    return True
        return False

    def project_callee(self, call: ast.AST) -> str | None:
        """The bare name of a function another module of the project may define, for a call
        ``helper(...)`` or ``utils.helper(...)`` (an imported module); None for methods and for
        functions of this file (rules follow those themselves)."""
        if not isinstance(call, ast.Call):
            return None
        func = call.func
        if isinstance(func, ast.Name):
            return None if func.id in self.functions else func.id
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in self.aliases:
            return func.attr
        return None

    def calls_project_function_that(self, call: ast.AST, fact: str) -> bool:
        """Whether ``call`` runs a function of another linted file known to do ``fact``."""
        name = self.project_callee(call)
        if name is None:
            return False
        self.asked.add((name, fact))
        return self.project.has(name, fact)

    def reaches(self, roots: Iterable[ast.AST], predicate: Callable[[ast.AST], bool], depth: int = 3) -> ast.AST | None:
        """First node under ``roots`` matching ``predicate``, following calls to functions of this file."""
        seen: set[int] = set()
        frontier = list(roots)
        for _ in range(depth + 1):
            nxt: list[ast.AST] = []
            for root in frontier:
                for node in self.walk_scope(root if not isinstance(root, FUNCTION_TYPES) else root.body):
                    if predicate(node):
                        return node
                    if isinstance(node, ast.Call):
                        name = node.func.id if isinstance(node.func, ast.Name) else (
                            node.func.attr if isinstance(node.func, ast.Attribute)
                            and isinstance(node.func.value, ast.Name) and node.func.value.id == "self" else None)
                        for fn in self.functions.get(name or "", []):
                            if id(fn) not in seen:
                                seen.add(id(fn))
                                nxt.append(fn)
            frontier = nxt
            if not frontier:
                break
        return None

    # ------------------------------------------------------------------ text
    def segment(self, node: ast.AST) -> str:
        # not ast.get_source_segment: it splits the whole file into lines on every call
        if getattr(node, "end_lineno", None) is None or getattr(node, "lineno", None) is None:
            return ""
        return self.locator.source(node)


NO_GRAD_CONTEXTS = {
    "torch.no_grad", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad",
    "torch.inference_mode", "torch.autograd.inference_mode", "torch.autograd.grad_mode.inference_mode",
}

_CANONICAL_PREFIXES = [
    ("torch.nn.modules.loss.", "torch.nn."),
    ("torch.nn.modules.", None),
    ("torch.nn.parallel.distributed.", "torch.nn.parallel."),
    ("torch.utils.data.dataloader.", "torch.utils.data."),
    ("torch.utils.data.distributed.", "torch.utils.data."),
    ("torch.cuda.amp.grad_scaler.", "torch.cuda.amp."),
    ("torch.functional.", "torch."),
]


def canonical(qn: str) -> str:
    """Map internal module paths to the public ones rules compare against."""
    for prefix, repl in _CANONICAL_PREFIXES:
        if qn.startswith(prefix):
            rest = qn[len(prefix):]
            if repl is None:  # torch.nn.modules.<file>.<Class> -> torch.nn.<Class>
                parts = rest.split(".")
                return "torch.nn." + parts[-1] if len(parts) >= 2 and parts[-1][:1].isupper() else qn
            return repl + rest
    return qn


def keyword(call: ast.Call, name: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def argument(call: ast.Call, name: str, position: int | None = None) -> ast.expr | None:
    """A call's argument by keyword, else by position (when no ``*args`` comes before it)."""
    value = keyword(call, name)
    if value is not None:
        return value
    if position is not None and len(call.args) > position and not any(
            isinstance(a, ast.Starred) for a in call.args[: position + 1]):
        return call.args[position]
    return None


def keyword_is_true(call: ast.Call, name: str) -> bool:
    value = keyword(call, name)
    return value is not None and is_const(value, True)


def is_const(node: ast.AST | None, value: object) -> bool:
    return isinstance(node, ast.Constant) and node.value is value if isinstance(value, bool) or value is None else (
        isinstance(node, ast.Constant) and node.value == value)


def _branch(node: ast.If | ast.IfExp, child: ast.AST) -> str:
    if child is node.test:
        return "test"
    if isinstance(node, ast.IfExp):
        return "body" if child is node.body else "orelse"
    return "body" if child in node.body else "orelse"


def _is_backward_helper(call: ast.Call) -> bool:
    """``accelerator.backward(loss)``-style calls, as opposed to ``loss.backward(gradient)``."""
    receiver = call.func.value  # type: ignore[attr-defined]
    name = (receiver.id if isinstance(receiver, ast.Name)
            else receiver.attr if isinstance(receiver, ast.Attribute) else "")
    return (call.func.attr == "manual_backward"  # type: ignore[attr-defined]
            or name in ("accelerator", "fabric", "self", "trainer", "engine", "strategy"))


def mentions_rank(expr: ast.AST) -> bool:
    for node in ast.walk(expr):
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if name and _RANK_WORDS.search(name):
            return True
    return False


def _exits(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise, ast.Continue)) or (
        bool(body) and isinstance(body[-1], ast.Expr) and isinstance(body[-1].value, ast.Call)
        and isinstance(body[-1].value.func, (ast.Name, ast.Attribute))
        and (getattr(body[-1].value.func, "id", None)
             or getattr(body[-1].value.func, "attr", None)) in ("exit", "_exit")
    )
