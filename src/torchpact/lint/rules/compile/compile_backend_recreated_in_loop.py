from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import COMPREHENSION_TYPES, FileContext, keyword
from torchpact.lint.rule import Hit, Rule, last_names

_COMPILE = {"torch.compile"}
_PARTIAL = {"functools.partial", "functools.partialmethod"}


class CompileBackendRecreatedInLoop(Rule):
    """`torch.compile` in a loop with a backend callable created anew on every iteration.

    ## What it does
    Flags `torch.compile(..., backend=...)` inside a loop or comprehension when the backend is a new
    object each time round: a `lambda`, a `functools.partial(...)`, an instance `MyBackend(...)`, or
    a name bound to one of those (or a `def`) inside the loop. A backend given by name (`"inductor"`,
    `"eager"`) or as a function defined outside the loop is not flagged — nor is plain
    `torch.compile(model)` in a loop, which torch 2.13 handles without recompiling.

    ## Why is this bad?
    Dynamo caches compiled code on the function's code object, guarded by the backend's identity.
    On torch 2.13, `torch.compile(model)` repeated with the same backend reuses the first
    compilation (one graph however often it is called), but a different backend object fails that
    guard — `BACKEND_MATCH failure: torch.compile detected different backend callables` — so every
    iteration compiles the model again. After `recompile_limit` (8) compilations dynamo gives up:
    `torch._dynamo hit config.recompile_limit (8)`, and from then on the code runs eagerly, so the
    loop pays 8 full compilations to end up uncompiled.

    ## Fix safety
    No autofix: create the backend once, outside the loop (or pass it by name), and reuse it — or
    compile once outside the loop and call the compiled model inside.
    """

    code = "TP801"
    category = Category.COMPILE
    severity = Severity.WARNING
    requires = (
        "the backend given to `torch.compile` is a new object on each iteration of the loop",
    )
    facts = ("new-backend-each-call-recompiles",)
    message = ("torch.compile in a loop with a new backend object each iteration: dynamo recompiles every "
               "time (BACKEND_MATCH guard) and after 8 recompilations falls back to eager")
    fix_hint = "create the backend once outside the loop (or compile once outside it) and reuse it"
    nodes = (ast.Call,)
    calls = last_names(_COMPILE)
    triggers = ("compile",)

    valid = [
        """
import torch

def my_backend(gm, example_inputs):
    return gm.forward

compiled = torch.compile(model, backend=my_backend)
for x, y in loader:
    loss = criterion(compiled(x), y)
    loss.backward()
""",
        """
import torch
import functools

backend = functools.partial(my_backend, verbose=False)   # built once
for layer in model.layers:
    layer.forward = torch.compile(layer.forward, backend=backend)
for block in model.blocks:
    torch.compile(block, backend="inductor", mode="max-autotune-no-cudagraphs")
""",
    ]
    invalid = [
        """
import torch

for x, y in loader:
    out = torch.compile(model, backend=lambda gm, inputs: gm.forward)(x)
    criterion(out, y).backward()
""",
        """
import torch
from functools import partial

def compile_all(blocks, my_backend):
    return [torch.compile(b, backend=partial(my_backend, debug=True)) for b in blocks]
""",
        """
import torch

class Counting:
    def __call__(self, gm, inputs):
        return gm.forward

def evaluate(model, batches):
    for batch in batches:
        backend = Counting()
        fast = torch.compile(model, backend=backend)
        fast(batch)
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        if not isinstance(node, ast.Call) or ctx.call_name(node) not in _COMPILE:
            return
        backend = keyword(node, "backend")
        if backend is None:
            return
        loop = _innermost_loop(node, ctx)
        if loop is None:
            return
        what = _fresh_callable(backend, ctx)
        if what is None and isinstance(backend, ast.Name):
            what = _bound_fresh_in(backend, loop, ctx)
        if what is None:
            return
        kind = "comprehension" if isinstance(loop, COMPREHENSION_TYPES) else "loop"
        message = (f"torch.compile in a {kind} with a backend that is {what}, a new object each iteration: "
                   "dynamo recompiles every time (BACKEND_MATCH guard) and after 8 recompilations runs eagerly")
        yield self.hit(node, message=message)


def _innermost_loop(node: ast.AST, ctx: FileContext) -> ast.AST | None:
    loops = ctx.enclosing_loops(node)
    child = node
    for anc in ctx.ancestors(node):
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            break
        if isinstance(anc, COMPREHENSION_TYPES) and child is not anc.generators[0].iter:
            return anc
        if loops and anc is loops[0]:
            return anc
        child = anc
    return loops[0] if loops else None


def _fresh_callable(expr: ast.AST, ctx: FileContext) -> str | None:
    if isinstance(expr, ast.Lambda):
        return "a lambda"
    if isinstance(expr, ast.Call):
        qn = ctx.call_name(expr)
        if qn in _PARTIAL:
            return "a `functools.partial(...)`"
        f = expr.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        if name in ctx.classes or (name[:1].isupper() and not name.isupper()):
            return f"a new `{name}(...)` instance"
    return None


def _bound_fresh_in(name: ast.Name, loop: ast.AST, ctx: FileContext) -> str | None:
    """What ``name`` is bound to inside ``loop`` when that is a fresh callable each iteration."""
    inside = {id(n) for n in ast.walk(loop)}
    for owner, value in ctx.bindings(name):
        if id(owner) in inside and value is not None:
            found = _fresh_callable(value, ctx)
            if found is not None:
                return found
    for fn in ctx.functions.get(name.id, []):
        if id(fn) in inside:
            return "a function defined inside the loop"
    return None
