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
    magnitude 0.1 or more (or exactly 0) loses less than one digit; a one-element literal tensor
    (`torch.Tensor([1.0])`, `torch.tensor([0.5])`) holds a known value too.

    Nor is a result that settles near 0 before anything reads it. The cancellation only changes
    values of magnitude below about 1e-7 (float32), so `exp(x) - 1` (also multiplied by masks or
    scales) that is rounded to the nearest whole number or truncated toward 0 (`torch.round`,
    `.round()`, `torch.trunc`, `.long()`, `.int()`), clamped to a floor of at least 0.1
    (`torch.clamp(d, min=1)`, `d.clamp_min(0.5)`), ceiled or floored and then clamped to at least 1
    (`torch.clamp_min(torch.ceil(w), 1)`), or whose values below a threshold of at least 0.1 are all
    replaced (`d[d < 1] = 1`) — where it is computed, or in the first statement that reads the name
    it is bound to — comes out the same with `expm1` (durations in frames predicted as
    `exp(log_d) - 1`). A `ceil` or `floor` alone, a clamp to 0, a division (`(exp(x) - 1) / x`), or any
    other first read still needs the digits, and is flagged. The rule takes the factors for masks and
    scales: one above ~1e6 could lift a cancelled value past 0.5.

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
""", """
import torch

class Durations:
    def frames(self, log_d, mask):
        dur = (torch.exp(log_d) - 1) * mask * self.scale
        dur[dur < 1] = 1.0
        dur = torch.round(dur)
        return dur

    def lengths(self, pred, mask):
        wide = (torch.exp(pred) - 1) * mask
        counts = torch.clamp_min(torch.ceil(wide), 1)
        return counts, torch.clamp(torch.floor(torch.exp(pred) - 1.0), min=1.0)

def steps(h, infer):
    rounded = (torch.exp(h) - 1).round()
    floor = (torch.exp(h) - 1).clamp(min=1)
    if infer:
        w = torch.exp(h) - 1
        whole = w.long()
        return whole
    return rounded, floor, torch.trunc(torch.exp(h) - 1), torch.clamp(torch.exp(h) - 1.0, min=0.5, max=10)
""", """
import torch
inverse = torch.log(torch.exp(torch.Tensor([1.0])) - 1)
gap = torch.exp(torch.FloatTensor([2.0])) - 1, torch.exp(torch.tensor([0.5])) - 1
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
        Invalid("""
import torch

def spans(z, x):
    kept = torch.clamp(torch.exp(z) - 1, 0, 10)
    up = torch.ceil(torch.exp(z) - 1)
    d = torch.exp(z) - 1
    total = d.sum()
    d[d < 1] = 1
    ratio = (torch.exp(x) - 1) / x
    return kept, up, total, ratio.round(), torch.exp(torch.Tensor([1e-5])) - 1, torch.exp(torch.tensor([1.0, 1e-6])) - 1
""", fixed="""
import torch

def spans(z, x):
    kept = torch.clamp(torch.expm1(z), 0, 10)
    up = torch.ceil(torch.expm1(z))
    d = torch.expm1(z)
    total = d.sum()
    d[d < 1] = 1
    ratio = (torch.expm1(x)) / x
    return kept, up, total, ratio.round(), torch.expm1(torch.Tensor([1e-5])), torch.expm1(torch.tensor([1.0, 1e-6]))
""", count=6),
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
        if settled(node, ctx):
            return  # rounded or clamped before anything reads it: the values that cancel become 0 or the floor
        func = respell(call.func, ctx, "torch.expm1")
        edits = [ctx.locator.replace(node, f"{func}({ctx.locator.source(call.args[0])})")] if func else []
        yield self.hit(node, edits=edits)


_LEGACY_CONSTRUCTORS = frozenset({"torch.Tensor", "torch.FloatTensor", "torch.DoubleTensor", "torch.HalfTensor"})
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
        if qn in _LEGACY_CONSTRUCTORS and len(expr.args) == 1 and isinstance(expr.args[0], (ast.List, ast.Tuple)):
            return known_value(expr.args[0], ctx, d)  # ``torch.Tensor([1.0])`` (``torch.Tensor(3)`` is a size)
        if (qn == "builtins.float" or isinstance(expr.func, ast.Name) and expr.func.id == "float") \
                and len(expr.args) == 1:
            return known_value(expr.args[0], ctx, d)
        return None
    if isinstance(expr, (ast.List, ast.Tuple)) and len(expr.elts) == 1:
        return known_value(expr.elts[0], ctx, d)  # a one-element tensor holds that value
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


# ------------------------------------------------------------------ results that settle near 0
# to a whole number, to nearest or toward 0: every |v| < 0.5 becomes 0, whether it cancelled or not
_TO_ZERO = frozenset({"round", "trunc", "fix", "long", "int"})
_TO_WHOLE = frozenset({"ceil", "floor"})  # tiny v gives 1 / -1 where the cancelled 0 gives 0
_CLAMPS = frozenset({"clamp", "clip", "clamp_min"})


def settled(expr: ast.AST, ctx: FileContext) -> bool:
    """``expr`` (``exp(x) - 1``, maybe multiplied by masks or scales) is rounded or truncated to a whole
    number, clamped to a floor of at least 0.1 (of at least 1 after ``ceil`` / ``floor``), or has every
    value below a threshold of at least 0.1 replaced (``d[d < 1] = 1``) before anything else reads it."""
    value = expr
    while isinstance(parent := ctx.parent(value), ast.BinOp) and isinstance(parent.op, ast.Mult):
        value = parent
    if _settles_at(value, ctx):
        return True
    statement = ctx.parent(value)
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name) and statement.value is value):
        return False
    name = statement.targets[0].id
    owner = ctx.parent(statement)
    body = next((b for f in ("body", "orelse", "finalbody")
                 if isinstance(b := getattr(owner, f, None), list) and statement in b), [])
    for later in body[body.index(statement) + 1:] if body else []:
        reads = [n for n in ast.walk(later) if isinstance(n, ast.Name) and n.id == name]
        if reads:  # the first statement that reads it decides
            return _masked_floor(later, name) or all(
                isinstance(n.ctx, ast.Load) and _settles_at(n, ctx) for n in reads)
    return False


def _settles_at(value: ast.AST, ctx: FileContext) -> bool:
    op, call, method = _applied(value, ctx)
    if op in _TO_ZERO or (op in _CLAMPS and _floor(call, method) >= 0.1):
        return True
    if op in _TO_WHOLE:
        outer, clamp, outer_method = _applied(call, ctx)
        return outer in _CLAMPS and _floor(clamp, outer_method) >= 1
    return False


def _applied(value: ast.AST | None, ctx: FileContext) -> tuple[str | None, ast.Call | None, bool]:
    """The torch operation applied to ``value`` (``torch.round(v)`` or ``v.round()``), its call, and
    whether it is the method form."""
    parent = ctx.parent(value) if value is not None else None
    if isinstance(parent, ast.Call) and parent.args and parent.args[0] is value:
        qn = ctx.call_name(parent) or ""
        if qn.startswith("torch.") and qn.count(".") == 1:
            return qn.rsplit(".", 1)[-1], parent, False
    if isinstance(parent, ast.Attribute) and parent.value is value:
        call = ctx.parent(parent)
        if isinstance(call, ast.Call) and call.func is parent:
            return parent.attr, call, True
    return None, None, False


def _floor(call: ast.Call | None, method: bool) -> float:
    """The literal lower bound a clamp sets (``min``, the input's next argument); -inf when none."""
    bound = argument(call, "min", 0 if method else 1) if call is not None else None
    if isinstance(bound, ast.Constant) and type(bound.value) in (int, float):
        return float(bound.value)
    return float("-inf")


def _masked_floor(statement: ast.stmt, name: str) -> bool:
    """``name[name < t] = c`` (or ``<=``) with a literal ``t`` of at least 0.1 and a literal ``c``:
    every value the cancellation touches is replaced."""
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
        return False
    target = statement.targets[0]
    if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id == name):
        return False
    test = target.slice
    return (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Lt, ast.LtE))
            and isinstance(test.left, ast.Name) and test.left.id == name
            and isinstance(test.comparators[0], ast.Constant) and type(test.comparators[0].value) in (int, float)
            and test.comparators[0].value >= 0.1 and isinstance(statement.value, ast.Constant))
