from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import LOSS_FN, FileContext
from torchpact.lint.rule import Invalid, Hit, Rule
from torchpact.lint.rules.autograd._grad import PASS_METHODS, requires_grad
from torchpact.lint.rules.autograd._util import (
    creates_grad_leaf, grad_leaf, inplace_method, inplace_writes, parameter_loop_binding, pos, scope_body,
)

MAYBE_SELF = {"to", "cuda", "cpu", "float", "double", "half", "bfloat16", "type", "type_as", "contiguous",
              "requires_grad_", "detach_", "detach", "data"}
SOFTMAX_CONSUMERS = {"cross_entropy", "softmax", "log_softmax", "nll_loss", "CrossEntropyLoss", "Softmax",
                     "LogSoftmax", "sparse_softmax_cross_entropy"}


class InplaceUnderNoGradOnGraph(Rule):
    """A tensor in the autograd graph is changed in place under `torch.no_grad()`, then used in the loss.

    ## What it does
    Flags an in-place write (`logits.clamp_(...)`, `logits.div_(t)`, `out[mask] = 0.0`,
    `h *= scale`) inside a `torch.no_grad()` / `inference_mode()` block when the tensor is a non-leaf
    computed with gradients enabled (a model's output in training code, or arithmetic on tensors
    that require grad) and is used again after the block, with gradients enabled, in computing what
    `backward()` / `torch.autograd.grad` is then called on. Leaves and parameters (the usual optimizer-style
    update under `no_grad`) are not flagged; neither is filling with a large negative number
    (`-inf`, `-1e9`, `torch.finfo(...).min`) when the tensor goes into a softmax / cross-entropy.

    ## Why is this bad?
    Autograd does not record what happens under `no_grad`, but the loss is computed from the
    modified values. On torch 2.13 (tested): the loss value equals that of the out-of-place version,
    yet backward treats the in-place op as the identity — after `logits.clamp_(-0.5, 0.5)` the
    gradient of the clamped entries is not zeroed, after `logits.div_(2.0)` it is not halved — so the
    parameters' gradients are silently wrong, with no error (in the proof, on a small linear
    layer, the weight gradient is off by 0.04 to 2). If the op that
    produced the tensor saved it for its own backward (`sigmoid`, `exp`, `tanh`, `softmax`, ...),
    backward instead raises `RuntimeError: one of the variables needed for gradient computation
    has been modified by an inplace operation: [torch.FloatTensor [3, 5]], which is output 0 of
    Sigmoid, is at version 1; expected version 0 instead.` (the version counter is bumped
    even under `no_grad`). Masking logits with `-1e9` or `-inf` before `cross_entropy` gives
    bit-identical gradients to `masked_fill` (softmax sends those entries' gradient to 0 anyway),
    so it is not flagged there — but before a regression loss it is just as wrong.

    ## Fix safety
    No autofix: write it out of place with gradients enabled
    (`logits = logits.clamp(-0.5, 0.5)`, `logits = logits.masked_fill(mask, 0.0)`). If the identity
    gradient is intended (a straight-through estimator), say so explicitly:
    `x = x + (x.clamp(-0.5, 0.5) - x).detach()`.
    """

    code = "TP207"
    category = Category.AUTOGRAD
    severity = Severity.WARNING
    requires = (
        "the written tensor is a non-leaf computed with gradients on (resolved through dataflow)",
        "it is used after the `no_grad` block in computing what is back-propagated",
    )
    facts = ("inplace-under-no-grad-is-silent",)
    message = ("in-place change under no_grad to a tensor in the autograd graph that the loss then uses: "
               "backward ignores the change (silently wrong gradients) or raises if the op saved the tensor")
    fix_hint = "do it out of place with gradients enabled (`x = x.clamp(...)`, `x = x.masked_fill(mask, v)`)"
    nodes = (ast.Call, ast.AugAssign, ast.Assign)
    triggers = ("no_grad", "inference_mode")

    valid = [
        """
import torch
import torch.nn.functional as F

def train_step(model, x, y, mask, optimizer):
    logits = model(x)
    logits = logits.masked_fill(mask, 0.0).clamp(-5, 5)
    loss = F.cross_entropy(logits, y)
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        for p in model.parameters():
            p.clamp_(-1, 1)
""",
        """
import torch
import torch.nn.functional as F

def train_step(model, x, y, mask, vocab):
    logits = model(x)
    with torch.no_grad():
        logits[mask] = -1e9
        logits.masked_fill_(mask, float("-inf"))
    loss = F.cross_entropy(logits.view(-1, vocab), y.view(-1))
    loss.backward()
""",
        """
import torch

def train_step(model, x, y):
    out = model(x)
    loss = (out - y).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        out.clamp_(0, 1)
        metric = out.mean()
""",
        """
import torch
import torch.nn.functional as F

def train_step(model, x, y):
    logits = model(x)
    loss = F.cross_entropy(logits, y)
    with torch.no_grad():
        logits.clamp_(-5, 5)
    accuracy = (logits.argmax(-1) == y).float().mean()
    loss.backward()
""",
        """
import torch

def attack(model, x, y, eps):
    delta = torch.zeros_like(x, requires_grad=True)
    for _ in range(10):
        loss = criterion(model(x + delta), y)
        loss.backward()
        with torch.no_grad():
            delta += eps * delta.grad.sign()
            delta.clamp_(-eps, eps)
""",
    ]
    invalid = [
        Invalid("""
import torch
import torch.nn.functional as F

def train_step(model, x, y, optimizer):
    logits = model(x)
    with torch.no_grad():
        logits.clamp_(-5.0, 5.0)
    loss = F.cross_entropy(logits, y)
    loss.backward()
    optimizer.step()
""", severity=Severity.INFO),
        Invalid("""
import torch
import torch.nn as nn

def train_step(model, x, target, mask, optimizer):
    pred = model(x)
    with torch.no_grad():
        pred[mask] = -1e9
    loss = nn.functional.mse_loss(pred, target)
    loss.backward()
""", severity=Severity.INFO),
        Invalid("""
import torch

def train_step(model, x, y, temperature):
    h = torch.sigmoid(model(x))
    with torch.inference_mode():
        h /= temperature
    loss = criterion(h, y)
    loss.backward()
""", severity=Severity.INFO),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        if not self._differentiates(ctx, None):
            return  # the whole file (``None``): most files never call backward
        for write, target in inplace_writes(node):
            if not isinstance(target, ast.Name) or not ctx.grad_disabled(write):
                continue
            if not self._differentiates(ctx, ctx.scope(write)):
                continue  # nothing in the function can feed a backward: the costly questions need no answer
            if not self._graph_non_leaf(ctx, target):
                continue
            block = self._no_grad_block(ctx, write)
            after = pos(write) if block is None else (block.end_lineno or 0, block.end_col_offset or 0)
            uses = self._later_grad_uses(ctx, write, target.id, after)
            feeding = self._feeding_backward(ctx, write, after)
            uses = [u for u in uses if any(ctx_contains(ctx, f, u) for f in feeding)]
            if not uses:
                continue
            if self._large_negative_fill(node) and any(self._softmax_like(ctx, u) for u in uses):
                continue
            yield self.hit(write, subject=target.id)

    @staticmethod
    def _differentiates(ctx: FileContext, scope: ast.AST | None) -> bool:
        """Whether ``scope`` (None: the file) has a call ``_feeding_backward`` starts from (``x.backward()``,
        ``torch.autograd.grad(...)``)."""
        key = ("differentiates", id(scope))
        found = ctx.memo.get(key)
        if found is None:
            nodes = ctx.nodes(ast.Call) if scope is None else ctx.walk_scope(scope_body(scope))
            found = ctx.memo[key] = any(
                isinstance(n, ast.Call) and ((isinstance(n.func, ast.Attribute) and n.func.attr == "backward")
                                             or ctx.call_name(n) in ("torch.autograd.backward", "torch.autograd.grad"))
                for n in nodes)
        return found  # type: ignore[return-value]

    @staticmethod
    def _graph_non_leaf(ctx: FileContext, target: ast.Name) -> bool:
        if grad_leaf(ctx, target):
            return False
        binds = ctx.bindings(target)
        for owner, value in binds:
            if parameter_loop_binding(ctx, owner, target.id) or creates_grad_leaf(ctx, value):
                return False
            if not isinstance(value, (ast.Call, ast.BinOp, ast.UnaryOp, ast.Subscript)):
                return False
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in MAYBE_SELF:
                return False
        return requires_grad(ctx, target)

    @staticmethod
    def _no_grad_block(ctx: FileContext, node: ast.AST) -> ast.AST | None:
        for anc in ctx.ancestors(node):
            if isinstance(anc, (ast.With, ast.AsyncWith)) and any(ctx.grad_mode_of_with(i) == "disabled"
                                                                  for i in anc.items):
                return anc
            if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                return None
        return None

    @staticmethod
    def _later_grad_uses(ctx: FileContext, write: ast.AST, name: str, after: tuple[int, int]) -> list[ast.Name]:
        """Loads of ``name`` after ``after`` with grad enabled, before ``name`` is rebound."""
        nodes = list(ctx.walk_scope(scope_body(ctx.scope(write))))
        rebinds = [pos(n) for n in nodes if isinstance(n, ast.Name) and n.id == name
                   and isinstance(n.ctx, ast.Store) and pos(n) > after]
        limit = min(rebinds) if rebinds else (10**9, 0)
        return [n for n in nodes if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
                and after < pos(n) < limit and not ctx.grad_disabled(n)]

    @staticmethod
    def _feeding_backward(ctx: FileContext, write: ast.AST, after: tuple[int, int]) -> list[ast.AST]:
        """Expressions evaluated after ``after`` that flow into a later ``backward()``: the backward
        target itself, and the values assigned (after ``after``) to the names it is computed from."""
        nodes = list(ctx.walk_scope(scope_body(ctx.scope(write))))
        roots: list[ast.AST] = []
        for n in nodes:
            if not (isinstance(n, ast.Call) and pos(n) > after and not ctx.grad_disabled(n)):
                continue
            if isinstance(n.func, ast.Attribute) and n.func.attr == "backward":
                roots.append(n.func.value)
                roots.extend(n.args)
            elif ctx.call_name(n) in ("torch.autograd.backward", "torch.autograd.grad") and n.args:
                roots.append(n.args[0])
        assigns = [n for n in nodes if isinstance(n, (ast.Assign, ast.AugAssign)) and pos(n) > after]
        feeding = list(roots)
        seen: set[str] = set()
        todo = [n.id for r in roots for n in ast.walk(r) if isinstance(n, ast.Name)]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            for a in assigns:
                targets = a.targets if isinstance(a, ast.Assign) else [a.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    feeding.append(a.value)
                    todo.extend(n.id for n in ast.walk(a.value) if isinstance(n, ast.Name))
        return feeding

    @staticmethod
    def _large_negative_fill(node: ast.AST) -> bool:
        if isinstance(node, ast.Assign):
            value = node.value
        elif isinstance(node, ast.Call) and inplace_method(node) in ("masked_fill_", "fill_", "index_fill_",
                                                                     "fill_diagonal_"):
            value = node.args[-1] if node.args else None
        else:
            return False
        return _is_large_negative(value)

    @staticmethod
    def _softmax_like(ctx: FileContext, use: ast.Name) -> bool:
        """The use feeds a softmax / cross-entropy (or a loss function of unknown kind), possibly
        through reshapes and indexing (``F.cross_entropy(logits.view(-1, v), y)``)."""
        cur: ast.AST = use
        while True:
            parent = ctx.parent(cur)
            grand = ctx.parent(parent) if parent is not None else None
            if isinstance(parent, ast.Attribute) and parent.attr in PASS_METHODS \
                    and parent.attr not in SOFTMAX_CONSUMERS and isinstance(grand, ast.Call) and grand.func is parent:
                cur = grand
            elif isinstance(parent, ast.Subscript) and parent.value is cur:
                cur = parent
            else:
                break
        parent = ctx.parent(cur)
        if isinstance(parent, ast.Attribute) and parent.attr in SOFTMAX_CONSUMERS:
            return True
        if isinstance(parent, ast.Call) and cur in parent.args:
            qn = ctx.call_name(parent) or ""
            last = qn.rsplit(".", 1)[-1] if qn else (parent.func.attr if isinstance(parent.func, ast.Attribute) else "")
            if last in SOFTMAX_CONSUMERS:
                return True
            if LOSS_FN in ctx.kinds(parent.func):
                ctor = [ctx.call_name(v) or "" for v in ctx.values(parent.func) if isinstance(v, ast.Call)]
                return not ctor or any(c.rsplit(".", 1)[-1] in SOFTMAX_CONSUMERS for c in ctor)
        return False


def ctx_contains(ctx: FileContext, root: ast.AST, node: ast.AST) -> bool:
    """Whether ``node`` lies inside ``root``."""
    return node is root or any(a is root for a in ctx.ancestors(node))


def _is_large_negative(value: ast.AST | None) -> bool:
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub) and isinstance(value.operand, ast.Constant):
        v = value.operand.value
        return isinstance(v, (int, float)) and v >= 1e4
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub):
        return _is_inf(value.operand)
    if isinstance(value, ast.Constant) and isinstance(value.value, (int, float)):
        return value.value <= -1e4
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "float" and value.args:
        a = value.args[0]
        return (isinstance(a, ast.Constant) and isinstance(a.value, str)
                and a.value.strip().lower() in ("-inf", "-infinity"))
    if isinstance(value, ast.Attribute) and value.attr == "min":  # torch.finfo(dtype).min
        return True
    return False


def _is_inf(value: ast.AST) -> bool:
    if isinstance(value, ast.Attribute) and value.attr == "inf":
        return True
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "float" \
        and bool(value.args) and isinstance(value.args[0], ast.Constant) \
        and str(value.args[0].value).lower() in ("inf", "infinity")
