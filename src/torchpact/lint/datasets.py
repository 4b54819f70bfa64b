"""Which dataset classes serve items already held in memory, read from the class alone (no context).

A dataset's items are in memory when every item it serves is an index into (or an element of) data
the object already holds: ``__getitem__`` returns ``self.x[i]`` / ``(self.x[i], self.y[i])`` /
``{"x": self.x[i]}``, or ``__iter__`` yields such items, yields ``from`` a held array, or yields
values made by torch's tensor factories (``torch.rand(1)``). The data held counts as in memory when
every assignment of the attribute in the class builds it: a torch tensor function, a numpy array
function (not ``load`` / ``memmap`` / ``fromfile``, which may map a file), a method of such a value
(``.astype(...)``, ``.float()``), arithmetic or indexing on it, ``range``, a literal, or a local name
bound to one of those. A value ``__init__`` computes by any other call (``self.x = simulator(theta)``,
``self.theta = prior.sample((n,))``) is computed once, at construction, whatever computed it, so it
counts too, unless the call is lazy by type: its name says it opens, maps or streams something
(``open``, ``File``, ``memmap``/``mmap``, ``h5``, ``zarr``, ``lmdb``, ``Dataset``, ``Loader``, ``Reader``,
``stream``, ``cursor``, ``connect``, ``client``) or it passes ``mmap_mode=`` / ``mmap=``; the items of
such a value are read when indexed. A parameter of ``__init__`` may hold anything (a lazy file
handle) and is not in memory.

A dataset whose ``__iter__`` / ``__getitem__`` writes into an object its constructor was handed
(``self.metrics[key].append(v)``, ``self.sink[k] = v``, ``self.queue.put(x)`` on a parameter kept as an
attribute), or iterates a dataset of this file that does, serves the consuming process's own state:
a worker process iterates a copy, whose writes never reach the caller (``feeds_callers_state``).

Used by TP920 for the classes of the linted file and, through the project facts (``IN_MEMORY_ITEMS``),
for a class imported from another linted module.
"""

from __future__ import annotations

import ast

_ARRAY_ROOTS = ("torch", "numpy")
# Functions of those namespaces that may read a file lazily or return something that is not an array.
_NOT_IN_MEMORY = ("load", "memmap", "fromfile", "from_file", "open", "read", "loadtxt", "genfromtxt",
                  "DataLoader", "Dataset")
# Callee names (lower case, by substring) of values read lazily when indexed (see above).
_LAZY = ("open", "file", "memmap", "mmap", "h5", "zarr", "lmdb", "dataset", "loader", "reader", "stream",
         "cursor", "connect", "client")
_DEPTH = 20
_UNKNOWN = ast.Constant(value=None)  # an attribute bound by unpacking: not followed


def in_memory_classes(tree: ast.Module) -> list[str]:
    """The names of the classes in ``tree`` whose items are in memory (see above)."""
    roots = array_aliases(tree)
    return [n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and serves_held_items(n, roots)]


def array_aliases(tree: ast.Module) -> dict[str, str]:
    """Local names of the torch / numpy modules and of names imported from them."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in _ARRAY_ROOTS:
                    out[(a.asname or a.name).split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module.split(".")[0] in _ARRAY_ROOTS:
                for a in node.names:
                    out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def serves_held_items(cls: ast.ClassDef, roots: dict[str, str]) -> bool:
    """Whether ``cls`` defines ``__getitem__`` or ``__iter__`` and every item either serves is in memory."""
    methods = {s.name: s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    held = _Held(cls, roots)
    served = [m for name, m in methods.items() if name in ("__getitem__", "__iter__")]
    if not served:
        return False
    for method in served:
        outs = [n for n in _own_nodes(method) if isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom))]
        if not outs:
            return False
        for out in outs:
            if out.value is None:
                if isinstance(out, ast.Return) and method.name == "__iter__":
                    continue  # the generator's end
                return False
            if isinstance(out, ast.Return) and method.name == "__iter__" and not _is_generator(method):
                ok = held.source(out.value, method)  # ``return iter(self.data)``
            elif isinstance(out, ast.YieldFrom):
                ok = held.source(out.value, method)
            else:
                ok = held.item(out.value, method)
            if not ok:
                return False
    return True


def _is_generator(fn: ast.AST) -> bool:
    return any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in _own_nodes(fn))


def _own_nodes(fn: ast.AST):
    """The nodes of a function's body, without nested functions, lambdas and classes."""
    stack = list(getattr(fn, "body", []))
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                stack.append(child)


def _dotted(expr: ast.AST) -> str | None:
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name):
        return ".".join([expr.id, *reversed(parts)])
    return None


class _Held:
    """What a dataset class holds: whether an attribute (``self.x``) or a local name is array data."""

    def __init__(self, cls: ast.ClassDef, roots: dict[str, str]):
        self.roots = roots
        self.attrs: dict[str, list[tuple[ast.AST, ast.AST]]] = {}  # attr -> [(method, value)]
        for method in cls.body:
            if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in _own_nodes(method):
                targets = node.targets if isinstance(node, ast.Assign) else \
                    [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None else []
                for t in targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        self.attrs.setdefault(t.attr, []).append((method, node.value))
                    elif isinstance(t, (ast.Tuple, ast.List)) and any(
                            isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self"
                            for e in t.elts):
                        for e in t.elts:  # ``self.x, self.y = ...``: unpacked, not followed
                            if isinstance(e, ast.Attribute):
                                self.attrs.setdefault(e.attr, []).append((method, _UNKNOWN))

    def item(self, expr: ast.AST, fn: ast.AST, depth: int = _DEPTH) -> bool:
        """An item made of held data: an index into it, a tensor factory's value, a tuple/dict of those."""
        if depth <= 0:
            return False
        if isinstance(expr, (ast.Tuple, ast.List)):
            return bool(expr.elts) and all(self.item(e, fn, depth - 1) for e in expr.elts)
        if isinstance(expr, ast.Dict):
            return bool(expr.values) and all(self.item(v, fn, depth - 1) for v in expr.values)
        if isinstance(expr, ast.Subscript):
            return self.array(expr.value, fn, depth - 1)
        if isinstance(expr, ast.Name):
            return self._local(expr, fn, depth, self.item)
        return self.array(expr, fn, depth - 1)

    def source(self, expr: ast.AST, fn: ast.AST, depth: int = _DEPTH) -> bool:
        """What ``yield from`` / ``iter(...)`` walks: held data, or ``iter(held)``."""
        if (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("iter", "zip")
                and expr.args):
            return all(self.source(a, fn, depth - 1) for a in expr.args)
        return self.array(expr, fn, depth - 1)

    def array(self, expr: ast.AST, fn: ast.AST, depth: int) -> bool:
        """Data built in memory: see the module docstring."""
        if depth <= 0:
            return False
        if isinstance(expr, ast.Constant):
            return expr is not _UNKNOWN
        if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
            return all(self.array(e, fn, depth - 1) for e in expr.elts)
        if isinstance(expr, (ast.ListComp, ast.GeneratorExp)):
            return all(self.array(g.iter, fn, depth - 1) for g in expr.generators) and self._comp_elt(expr, fn, depth)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
            values = self.attrs.get(expr.attr, [])
            return bool(values) and all(self.array(v, m, depth - 1) or self._built(v, m, depth - 1)
                                        for m, v in values)
        if isinstance(expr, ast.Name):
            return self._local(expr, fn, depth, lambda e, f, d: self.array(e, f, d - 1))
        if isinstance(expr, ast.Subscript):
            return self.array(expr.value, fn, depth - 1)
        if isinstance(expr, ast.BinOp):
            return self.array(expr.left, fn, depth - 1) or self.array(expr.right, fn, depth - 1)
        if isinstance(expr, ast.UnaryOp):
            return self.array(expr.operand, fn, depth - 1)
        if isinstance(expr, ast.Call):
            name = _dotted(expr.func)
            if name in ("range", "list", "tuple", "sorted") and not expr.keywords:
                return name == "range" or (len(expr.args) == 1 and self.array(expr.args[0], fn, depth - 1))
            if name is not None:
                head, _, rest = name.partition(".")
                origin = self.roots.get(head)
                if origin is not None:
                    last = name.rsplit(".", 1)[-1]
                    return not any(word in last for word in _NOT_IN_MEMORY)
            if isinstance(expr.func, ast.Attribute):  # ``rng.normal(...)``, ``x.astype(np.float32)``
                return (not any(w in expr.func.attr for w in _NOT_IN_MEMORY)
                        and self.array(expr.func.value, fn, depth - 1))
        return False

    def _built(self, expr: ast.AST, fn: ast.AST, depth: int) -> bool:
        """A value ``__init__`` computes once by a call that is not lazy by type (see above), or
        indexing or arithmetic on one."""
        if depth <= 0 or getattr(fn, "name", None) != "__init__":
            return False
        if isinstance(expr, (ast.Subscript, ast.Attribute)) and not (
                isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name)):
            return self._built(expr.value, fn, depth - 1)
        if isinstance(expr, ast.Name):
            return self._local(expr, fn, depth, self._built)
        if isinstance(expr, ast.Call):
            name = _dotted(expr.func) or (expr.func.attr if isinstance(expr.func, ast.Attribute) else "")
            if name.partition(".")[0] in self.roots:
                return False  # torch / numpy: ``array`` judged it (``np.load`` may map the file)
            last = name.rsplit(".", 1)[-1].lower()
            return (bool(last) and not any(w in last for w in _LAZY)
                    and not any(k.arg in ("mmap_mode", "mmap") for k in expr.keywords))
        return False

    def _comp_elt(self, comp: ast.ListComp | ast.GeneratorExp, fn: ast.AST, depth: int) -> bool:
        bound = {n.id for g in comp.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        elt = comp.elt
        names = [n for n in ast.walk(elt) if isinstance(n, ast.Name)]
        calls = [n for n in ast.walk(elt) if isinstance(n, ast.Call)]
        return not calls and all(n.id in bound or self.array(n, fn, depth - 1) for n in names)

    def _local(self, name: ast.Name, fn: ast.AST, depth: int, judge) -> bool:
        """A local name of ``fn``: every value bound to it is judged (a parameter is not known)."""
        values: list[ast.AST] = []
        for node in _own_nodes(fn):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name.id for t in node.targets):
                values.append(node.value)
            elif (isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name)
                  and node.target.id == name.id):
                values.append(_Element(node.iter))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name.id:
                if node.value is None:
                    continue
                values.append(node.value)
            elif isinstance(node, (ast.AugAssign, ast.NamedExpr, ast.With)) and name.id in {
                    n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}:
                return False
        if not values:
            return False
        return all(self.source(v.iterable, fn, depth - 1) if isinstance(v, _Element) else judge(v, fn, depth - 1)
                   for v in values)


class _Element(ast.AST):
    """An element of iterating ``iterable`` (a ``for`` target)."""

    _fields = ()

    def __init__(self, iterable: ast.AST):
        super().__init__()
        self.iterable = iterable


# Methods that write into the object they are called on.
_WRITES = frozenset({"append", "extend", "update", "put", "put_nowait", "add", "setdefault", "insert",
                     "appendleft"})


def feeds_callers_state(cls: ast.ClassDef, classes: dict[str, ast.ClassDef], depth: int = 3) -> bool:
    """Whether ``cls``'s ``__iter__`` / ``__getitem__`` writes into an object its constructor was handed,
    or iterates a dataset (held from a constructor parameter annotated with a class of ``classes``)
    that does: the items serve the consuming process's own state, which a worker's copy never reaches."""
    if depth <= 0:
        return False
    methods = {s.name: s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    init = methods.get("__init__")
    if init is None:
        return False
    params = {a.arg: a.annotation for a in [*init.args.posonlyargs, *init.args.args, *init.args.kwonlyargs][1:]}
    handed: dict[str, ast.AST | None] = {}  # attribute -> the annotation of the parameter it keeps
    for node in _own_nodes(init):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in params:
            for t in node.targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    handed[t.attr] = params[node.value.id]
    if not handed:
        return False
    for method in (methods.get("__iter__"), methods.get("__getitem__")):
        for node in _own_nodes(method) if method is not None else ():
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _WRITES
                    and _held_attr(node.func.value) in handed):
                return True
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AugAssign) else []
            if any(isinstance(t, ast.Subscript) and _held_attr(t.value) in handed for t in targets):
                return True
            if isinstance(node, (ast.For, ast.AsyncFor)) and (attr := _held_attr(node.iter)) in handed:
                inner = _annotated_class(handed[attr], classes)
                if inner is not None and feeds_callers_state(inner, classes, depth - 1):
                    return True
    return False


def _held_attr(expr: ast.AST) -> str | None:
    """``X`` for ``self.X``, ``self.X[k]``, ``self.X.y[k]``."""
    while isinstance(expr, (ast.Subscript, ast.Attribute)):
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
            return expr.attr
        expr = expr.value
    return None


def _annotated_class(annotation: ast.AST | None, classes: dict[str, ast.ClassDef]) -> ast.ClassDef | None:
    """The class of ``classes`` an annotation names (``Name`` or the string ``"Name"``)."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return classes.get(annotation.value.strip())
    if isinstance(annotation, ast.Name):
        return classes.get(annotation.id)
    return None


def concrete_subclasses(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> list[ast.ClassDef]:
    """``cls`` and its subclasses among ``classes`` (by base name, transitively) that define a
    ``__getitem__`` or ``__iter__`` with a body (not only ``raise`` / ``pass`` / ``...``)."""
    family = [cls]
    changed = True
    while changed:
        changed = False
        for other in classes.values():
            if other not in family and any(isinstance(b, ast.Name) and b.id in {c.name for c in family}
                                           for b in other.bases):
                family.append(other)
                changed = True
    return [c for c in family if any(
        isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name in ("__getitem__", "__iter__")
        and not _abstract(s) for s in c.body)]


def _abstract(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return all(isinstance(s, (ast.Raise, ast.Pass)) for s in body)
