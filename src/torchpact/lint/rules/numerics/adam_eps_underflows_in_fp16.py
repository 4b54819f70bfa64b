from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import FileContext, is_const, keyword
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules.numerics._util import (
    backward_follows,
    first_arg,
    half_cast,
    parameter_owners,
)

# Optimizer -> positional index of eps. Every default eps (1e-8; Adagrad 1e-10) is 0 in float16.
ADAPTIVE = {"Adam": 3, "AdamW": 3, "NAdam": 3, "RAdam": 3, "Adamax": 3, "RMSprop": 3, "Adagrad": 5}
# Half of float16's smallest subnormal (2**-24): anything below rounds to 0.
FP16_ZERO_BELOW = 2.0 ** -25


class AdamEpsUnderflowsInFp16(Rule):
    """An Adam-family optimizer with the default `eps` updates float16 parameters.

    ## What it does
    Flags `torch.optim.Adam` / `AdamW` / `NAdam` / `RAdam` / `Adamax` / `RMSprop` / `Adagrad` built
    over the parameters of a model cast to float16 (`model.half()`, `model.to(torch.float16)`, or a
    model created as `Net().half()`) when `eps` is left at its default (1e-8; 1e-10 for Adagrad) or
    set to a literal that is 0 in float16, and the model is trained after the cast. `fused=True` is
    not flagged (it computes the update in float32).

    ## Why is this bad?
    The optimizer state has the parameters' dtype, and `torch.tensor(1e-8, dtype=torch.float16)` is
    exactly 0. A squared gradient below float16's range (any gradient under about 8e-3 after Adam's
    `1 - beta2` factor) makes the second moment 0, and the denominator `sqrt(v) + eps` is then 0.
    On torch 2.13 a single `Adam` step on float16 parameters with gradients `[1e-4, 1e-6, 0.]` turns
    them into `[-inf, -inf, nan]`; `AdamW`, `NAdam`, `RMSprop` and `Adagrad` do the same, `RAdam` once
    its warm-up ends. With `eps=1e-4` the same step is finite. The model is NaN after one step.

    ## Fix safety
    No autofix: the right fix is usually to keep float32 parameters (master weights) and run the
    forward under `torch.autocast(dtype=torch.float16)` with a `GradScaler`; `eps=1e-4` (which float16
    can represent) is the minimal change when pure float16 is intended.
    """

    code = "TP305"
    category = Category.NUMERICS
    severity = Severity.ERROR
    requires = (
        "the optimizer is a resolved `torch.optim` Adam-family class, not fused, with the default `eps` or a "
        "literal one below float16's smallest subnormal",
        "the model whose `.parameters()` it is given is cast to float16 in the same scope before a `backward()` "
        "(on every path, for `error`)",
    )
    facts = ("adam-eps-underflows-in-fp16",)
    message = ("Adam-family optimizer with the default eps on float16 parameters: eps is 0 in float16, "
               "so small or zero gradients divide by zero and the parameters become inf/NaN")
    fix_hint = "keep float32 parameters and use torch.autocast + GradScaler, or pass eps=1e-4 for pure float16"
    nodes = (ast.Call,)
    calls = frozenset(ADAPTIVE)
    triggers = ("half", "float16")

    valid = [
        """
import torch
model = Net().cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
""",
        """
import torch
model = Net().half()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, eps=1e-4)
for x, y in loader:
    loss = model(x.half(), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
""",
        """
import torch
from torch import optim
def train(model, loader):
    optimizer = optim.Adam(model.parameters())
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.half()  # for inference after training
    torch.save(model.state_dict(), "model_fp16.pt")
""",
        """
import torch
model = Net().half()
teacher_opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
student_opt = torch.optim.Adam(student.parameters())
""",
    ]
    invalid = [
        Invalid("""
import torch
model = Net().cuda().half()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
for x, y in loader:
    loss = model(x.cuda().half(), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
""", evidence=Evidence.MUST),
        Invalid("""
import torch
from torch import optim
def train(model, loader, lr):
    model.to(dtype=torch.float16)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = optim.AdamW(params, lr, (0.9, 0.999), 1e-8, weight_decay=0.01)
    for batch in loader:
        model(**batch).loss.backward()
        opt.step()
        opt.zero_grad()
""", evidence=Evidence.MUST),
        Invalid("""
import torch
def train(model, loader, fp16):
    if fp16:
        model.half()
    opt = torch.optim.Adam(model.parameters())
    for x, y in loader:
        model(x, y).backward()
        opt.step()
""", severity=Severity.WARNING, evidence=Evidence.MAY),  # float16 on some paths only
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        qn = ctx.call_name(node)
        if not qn or not qn.startswith("torch.optim."):
            return
        name = qn.rsplit(".", 1)[-1]
        if name not in ADAPTIVE:
            return
        fused = keyword(node, "fused")
        if fused is not None and not is_const(fused, False):
            return
        index = ADAPTIVE[name]
        eps = node.args[index] if len(node.args) > index else keyword(node, "eps")
        if eps is not None:
            value = literal_number(eps)
            if value is None or value >= FP16_ZERO_BELOW:
                return
        owners = parameter_owners(ctx, first_arg(node, "params"))
        casts = [c for owner in owners for c in half_casts(ctx, owner, node)]
        if not casts:
            return
        cast = next((c for c in casts if not ctx.conditional(c)), None)
        if cast is None:
            cast = casts[0]
            ctx.note(Evidence.MAY, "the model is cast to float16 on some paths only")
        subject = ctx.locator.source(cast.func.value) if isinstance(cast.func, ast.Attribute) else None
        yield self.hit(node, subject=subject, evidence=Evidence.MUST)


def literal_number(node: ast.AST) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    return None


def half_casts(ctx: FileContext, owner: str, optimizer: ast.Call) -> Iterator[ast.Call]:
    """Casts to float16 of the model named ``owner`` that precede its training, in the optimizer's scope."""
    scope = ctx.scope(optimizer)
    body = scope.body if isinstance(getattr(scope, "body", None), list) else [scope]
    for node in ctx.walk_scope(body):
        if not isinstance(node, ast.Call) or not half_cast(ctx, node):
            continue
        # ``model.half()`` itself, or ``model = Net().cuda().half()``
        receiver = node.func.value  # type: ignore[attr-defined]
        target = None
        if ctx.locator.source(receiver) == owner:
            target = node
        else:
            stmt = ctx.statement(node)
            if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                    and ctx.locator.source(stmt.targets[0]) == owner and _in_call_chain(node, stmt.value)):
                target = node
        if target is not None and backward_follows(ctx, target, scope):
            yield target


def _in_call_chain(node: ast.AST, value: ast.AST) -> bool:
    """Whether ``node`` is ``value`` or a receiver in its method chain (``Net().half().cuda()``)."""
    cur = value
    while isinstance(cur, ast.Call) and isinstance(cur.func, ast.Attribute):
        if cur is node:
            return True
        cur = cur.func.value
    return cur is node
