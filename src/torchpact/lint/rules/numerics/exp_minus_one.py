from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, argument
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules._api import respell
from torchpact.lint.rules.numerics._integers import whole_numbers
from torchpact.lint.rules.numerics.log_of_one_plus import is_one
from torchpact.lint.analysis.following import follows_definitions


class ExpMinusOne(Rule):
    """`torch.exp(x) - 1` is computed instead of `torch.expm1(x)`.

    ## What it does
    Flags `torch.exp(x) - 1` (TorchFix TOR107).

    The condition it needs: `x` may hold values of magnitude well below 1. For a whole number `x`
    (an integer dtype, a count, a `floor` / `ceil` / `round` result: see `_integers.py`) `exp(x)` is
    1 exactly or at least e, and the subtraction cancels nothing, so it is not flagged. Nor is an
    `x` whose value the code fixes away from 0: a number literal, or arithmetic on literals, also
    inside `torch.tensor(...)` / `float(...)`, through names and `self.` attributes bound only to such
    values, a function parameter counting as its default (`torch.exp(torch.tensor(1.0 -
    self._epsilon)) - 1` with `epsilon: float = 1e-4` is `exp(0.9999) - 1 = 1.718`): a known value of
    magnitude 0.1 or more (or exactly 0) loses less than one digit.

    ## Why is this bad?
    For small `x`, `exp(x)` rounds to 1 and the subtraction cancels every significant digit: on
    torch 2.13, in float32, `torch.exp(1e-10) - 1` is exactly `0.` while `torch.expm1(1e-10)` is
    `1e-10`.

    ## Fix safety
    The fix rewrites the expression to `torch.expm1(x)`, the same function without the cancellation.
    """

    code = "TP320"
    category = Category.NUMERICS
    severity = Severity.INFO
    requires = (
        "the `exp` resolves to `torch.exp`, and 1 is subtracted from it",
    )
    message = "`torch.exp(x) - 1` cancels to 0 for small x"
    fix_hint = "use `torch.expm1(x)`"
    nodes = (ast.BinOp,)
    triggers = ("exp",)
    fixable = True

    valid = ["""
import torch
y = torch.expm1(x)
z = torch.exp(x) - 2
w = 1 - torch.exp(x)
""", """
import torch
steps = torch.arange(10)
growth = torch.exp(steps) - 1
""", """
import torch
def scaled(counts, n_bins: int):
    bins = torch.randint(0, n_bins, (counts,))
    return torch.exp(bins.float()) - 1.0
""", """
import torch
k = len(vocab)
boost = torch.exp(torch.tensor(k)) - 1
""", """
import torch
from torch import nn
SHIFT = 2.0

class Mixture(nn.Module):
    def __init__(self, components: int, epsilon: float = 1e-4):
        super().__init__()
        self._epsilon = epsilon

    def init_bias(self):
        return torch.log(torch.exp(torch.tensor(1.0 - self._epsilon)) - 1)

def inverse_softplus(beta=1.0, *, offset=0.5):
    return torch.log(torch.exp(torch.tensor(data=beta + offset)) - 1.0)

half = torch.exp(torch.as_tensor(float(3) / 4)) - 1
far = torch.exp(torch.tensor(-SHIFT)) - 1
for step in range(3):
    if step:
        gap = torch.exp(torch.tensor(0.25 * 2)) - 1
"""]
    invalid = [
        Invalid("""
import torch
y = torch.exp(x) - 1
z = torch.exp(-t / tau) - 1.0
""", fixed="""
import torch
y = torch.expm1(x)
z = torch.expm1(-t / tau)
""", count=2),
        Invalid("""
import torch
steps = torch.arange(10) / 10
growth = torch.exp(steps) - 1
""", fixed="""
import torch
steps = torch.arange(10) / 10
growth = torch.expm1(steps)
"""),
        Invalid("""
import torch
def scaled(counts, n_bins: int):
    bins = torch.rand(counts) * n_bins
    return torch.exp(bins.float()) - 1.0
""", fixed="""
import torch
def scaled(counts, n_bins: int):
    bins = torch.rand(counts) * n_bins
    return torch.expm1(bins.float())
"""),
        Invalid("""
import torch
TINY = 1e-5

def terms(eps, flag, margin=0.97):
    scale = 1.0 if flag else 1e-6
    return (torch.exp(torch.tensor(TINY)) - 1, torch.exp(torch.tensor(1 - eps)) - 1,
            torch.exp(torch.tensor(scale)) - 1, torch.exp(torch.tensor(1.0 - margin)) - 1)
""", fixed="""
import torch
TINY = 1e-5

def terms(eps, flag, margin=0.97):
    scale = 1.0 if flag else 1e-6
    return (torch.expm1(torch.tensor(TINY)), torch.expm1(torch.tensor(1 - eps)),
            torch.expm1(torch.tensor(scale)), torch.expm1(torch.tensor(1.0 - margin)))
""", count=4),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.BinOp)
        call = node.left
        if not (isinstance(node.op, ast.Sub) and is_one(node.right) and ctx.call_name(call) == "torch.exp"):
            return
        assert isinstance(call, ast.Call)
        if len(call.args) != 1 or call.keywords or whole_numbers(call.args[0], ctx):
            return  # exp(x) - 1 cancels only for |x| << 1, which no non-zero whole number is
        known = known_value(call.args[0], ctx)
        if known is not None and (known == 0 or abs(known) >= 0.1):
            return  # a value the code fixes away from 0: nothing cancels
        func = respell(call.func, ctx, "torch.expm1")
        edits = [ctx.locator.replace(node, f"{func}({ctx.locator.source(call.args[0])})")] if func else []
        yield self.hit(node, edits=edits)


_ARITHMETIC = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.Div: lambda a, b: a / b if b else None}


@follows_definitions(None)
def known_value(expr: ast.AST | None, ctx: FileContext, depth: int = 8) -> float | None:
    """The number ``expr`` always holds: a literal, arithmetic on known values, ``torch.tensor`` /
    ``float`` of one, a name or ``self.`` attribute every binding of which is known (a parameter:
    its default). None when any part is not known."""
    if expr is None or depth <= 0:
        return None
    d = depth - 1
    if isinstance(expr, ast.Constant):
        return float(expr.value) if type(expr.value) in (int, float) else None
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.USub, ast.UAdd)):
        v = known_value(expr.operand, ctx, d)
        return None if v is None else (-v if isinstance(expr.op, ast.USub) else v)
    if isinstance(expr, ast.BinOp) and type(expr.op) in _ARITHMETIC:
        a, b = known_value(expr.left, ctx, d), known_value(expr.right, ctx, d)
        return None if a is None or b is None else _ARITHMETIC[type(expr.op)](a, b)
    if isinstance(expr, ast.Call):
        qn = ctx.call_name(expr)
        if qn in ("torch.tensor", "torch.as_tensor"):
            return known_value(argument(expr, "data", 0), ctx, d)
        if (qn == "builtins.float" or isinstance(expr.func, ast.Name) and expr.func.id == "float") \
                and len(expr.args) == 1:
            return known_value(expr.args[0], ctx, d)
        return None
    if isinstance(expr, (ast.Name, ast.Attribute)):
        found = ctx.bindings(expr)
        values = {_parameter_default(owner, ctx, d) if isinstance(owner, ast.arg) else known_value(value, ctx, d)
                  for owner, value in found}
        return values.pop() if len(values) == 1 and found else None
    return None


def _parameter_default(arg: ast.arg, ctx: FileContext, depth: int) -> float | None:
    fn = ctx.parent(arg)
    fn = ctx.parent(fn) if isinstance(fn, ast.arguments) else fn
    spec = getattr(fn, "args", None)
    if not isinstance(spec, ast.arguments):
        return None
    positional = [*spec.posonlyargs, *spec.args]
    with_default = positional[len(positional) - len(spec.defaults):]
    defaults = dict(zip([a.arg for a in with_default], spec.defaults, strict=True))
    defaults.update({a.arg: v for a, v in zip(spec.kwonlyargs, spec.kw_defaults, strict=True) if v is not None})
    return known_value(defaults.get(arg.arg), ctx, depth)
