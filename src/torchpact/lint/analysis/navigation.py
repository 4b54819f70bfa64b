"""Where a node sits in its file: parents, scopes, loops and branches, and the walks of a scope.

Filled by lint's single walk of the file (``index``): every node by type and each node's parent. The
parents are a dict keyed by ``id``, not an attribute on the node, so trees have no reference cycles
and are freed as soon as the file is done, without the cyclic GC.
"""

from __future__ import annotations

import ast
from typing import Iterator

from torchpact.lint.tree_index import index_tree

FUNCTION_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
SCOPE_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.Module)
LOOP_TYPES = (ast.For, ast.AsyncFor, ast.While)
COMPREHENSION_TYPES = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_NESTED_SCOPES = frozenset({*FUNCTION_TYPES, ast.ClassDef})


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
        children: list[ast.AST] = []
        for name in node._fields:
            value = getattr(node, name, None)
            if type(value) is list:
                children += [item for item in value if isinstance(item, AST)]
            elif isinstance(value, AST) and not isinstance(value, CONTEXT):
                children.append(value)
        while children:
            push(children.pop())


class Navigation:
    """Parents, enclosing scopes, loops and branches of the nodes of one tree."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.parents: dict[int, ast.AST] = {}
        # every node of the file, grouped by type (filled by ``index``)
        self.by_type: dict[type, list[ast.AST]] = {}
        # ``walk_scope_once`` walks each root once per file (the analyses and rules walk the same
        # function bodies again and again)
        self._walks: dict[object, tuple[object, list[ast.AST]]] = {}

    def index(self) -> None:
        """The single walk of the file (``tree_index.index_tree``): parents and a by-type index."""
        self.by_type = index_tree(self.tree, self.parents)

    def nodes(self, *types: type) -> list[ast.AST]:
        """All nodes of these types in the file, in walk order."""
        if len(types) == 1:
            return self.by_type.get(types[0], [])
        return [n for t in types for n in self.by_type.get(t, [])]

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.parents.get(id(node))

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        parents = self.parents
        p = parents.get(id(node))
        while p is not None:
            yield p
            p = parents.get(id(p))

    def statement(self, node: ast.AST) -> ast.stmt | None:
        """The statement that contains ``node`` (itself when it is one)."""
        cur: ast.AST | None = node
        while cur is not None and not isinstance(cur, ast.stmt):
            cur = self.parent(cur)
        return cur

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
        loops: list[ast.AST] = []
        child = node
        for anc in self.ancestors(node):
            if isinstance(anc, FUNCTION_TYPES):
                break
            # the iterable of a for loop runs once, not per iteration
            if isinstance(anc, LOOP_TYPES) and not (isinstance(anc, (ast.For, ast.AsyncFor)) and child is anc.iter):
                if child not in anc.orelse:
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

    def walk_scope_once(self, root: ast.AST | list[ast.stmt]) -> Iterator[ast.AST]:
        """``walk_scope``, walked once per root and file."""
        key: object = tuple(map(id, root)) if isinstance(root, list) else id(root)
        walked = self._walks.get(key)
        if walked is None:
            # the entry holds the root (or its statements), so their ids cannot be reused by others
            walked = self._walks[key] = (tuple(root) if isinstance(root, list) else root, list(walk_scope(root)))
        return iter(walked[1])


def _branch(node: ast.If | ast.IfExp, child: ast.AST) -> str:
    if child is node.test:
        return "test"
    if isinstance(node, ast.IfExp):
        return "body" if child is node.body else "orelse"
    return "body" if child in node.body else "orelse"
