from __future__ import annotations

import ast

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, argument, is_const
from torchpact.lint.rule import Invalid
from torchpact.lint.rules._api import ApiUse
from torchpact.lint.analysis.following import follows_definitions


class DeprecatedTorchNorm(ApiUse):
    """`torch.norm` is used; it is deprecated and its `p=2` on a matrix is not the matrix 2-norm.

    ## What it does
    Flags calls of the function `torch.norm` (TorchFix TOR101); `x.norm()` is not flagged.

    ## Why is this bad?
    torch's documentation marks `torch.norm` deprecated ("may be removed in a future PyTorch
    release") in favour of `torch.linalg.vector_norm` / `matrix_norm` / `norm`; torch 2.13 does not
    warn (the proof checks it), so this is advice, not a removal notice. Its meaning
    depends on its arguments in ways that surprise: on torch 2.13 `torch.norm(M, p=2)` of a matrix
    flattens it (the Frobenius norm), while `torch.linalg.norm(M, 2)` is the spectral norm — the
    two differ on most matrices. That remark is made only where the call leaves it ambiguous: a
    numeric `p=2` written out (positional or keyword, or a name that may hold 2), with `dim=None`,
    on an input that may have 2 or more dimensions. The default `p` is `'fro'` in `torch.norm`'s
    signature: `torch.norm(M)` asks for the flattened (Frobenius) norm, the value
    `torch.linalg.norm(M)` and `torch.linalg.vector_norm(M)` also compute by default (checked on
    2.13), so nothing there reads like the matrix 2-norm and its use as a magnitude (printed,
    compared, clipping or normalising a whole tensor) is what it means. An explicit `p='fro'`
    likewise, and `p=2` over the `dim` given (one dim, or several) is by definition the vector norm
    over those dims, what `torch.linalg.vector_norm(x, p, dim)` computes: the finding then says only
    that the function is deprecated. Nor is it made for other `p` (`1`, `inf`, `'nuc'`), or for an
    input known to be 1-D (`torch.stack` of full reductions, `torch.arange` / `linspace`, a factory
    given one int size such as `torch.ones(n)` / `torch.zeros(len(x))` / `torch.randn(n)` or a
    one-element shape `size=(n,)`, and such a value times or plus a number).

    ## Fix safety
    No autofix, because the right replacement depends on what was meant: `torch.linalg.vector_norm(x,
    p)` keeps `torch.norm`'s flattening behaviour exactly; `torch.linalg.matrix_norm` computes
    matrix norms.
    """

    code = "TP329"
    category = Category.NUMERICS
    severity = Severity.INFO
    message = ("`torch.norm` is marked deprecated in torch's documentation (torch 2.13 does not warn), and its `p=2` "
               "on a matrix flattens it instead of taking the matrix 2-norm")
    fix_hint = "use `torch.linalg.vector_norm(x, p, dim)` (same result) or `torch.linalg.matrix_norm` for matrix norms"
    triggers = ("norm",)
    names = {"torch.norm": None}

    def describe_call(self, call: ast.Call, ctx: FileContext, qn: str) -> str | None:
        dim = argument(call, "dim", 2)
        p = argument(call, "p", 1)
        if dim is not None and not is_const(dim, None):
            # over the dims given: a vector norm over them, exactly what linalg.vector_norm computes
            return ("`torch.norm` is marked deprecated in torch's documentation (torch 2.13 does not warn); "
                    "over the `dim` given it computes what `torch.linalg.vector_norm` does")
        if p is None or is_const(p, None):
            return ("`torch.norm` is marked deprecated in torch's documentation (torch 2.13 does not warn); "
                    "with its default `p='fro'` it computes the flattened norm, what `torch.linalg.vector_norm` does")
        if not _numeric_two(p):
            return ("`torch.norm` is marked deprecated in torch's documentation (torch 2.13 does not warn); "
                    "the `p` it is given says which norm is meant")
        if _one_dimensional(argument(call, "input", 0), ctx):
            return ("`torch.norm` is marked deprecated in torch's documentation (torch 2.13 does not warn); "
                    "on this 1-D input it computes what `torch.linalg.vector_norm` does")
        return None

    valid = ["""
import torch
n = torch.linalg.vector_norm(g, 2)
m = grad.norm()
"""]

    invalid = ["""
import torch
total = torch.norm(torch.stack([p.grad.norm() for p in params]), 2)
""", """
import torch
lengths = torch.norm(vectors, dim=-1, keepdim=True)
""", Invalid("""
import torch
def spectral_loss(mag, target_mag):
    return torch.norm(target_mag - mag, p="fro") / torch.norm(target_mag, "fro")

def grn(x, gamma):
    gx = torch.norm(x, p=2, dim=(1, 2), keepdim=True)
    return gamma * gx

def matrix_size(weight, order):
    return torch.norm(weight), torch.norm(weight, 2.0), torch.norm(weight, p=order), torch.norm(weight, 1)
""", count=7), Invalid("""
import torch
def magnitudes(model, sigma, n):
    for p in model.parameters():
        print(torch.norm(p.grad).item())
    iso = torch.norm(sigma * torch.ones(n))
    unit = torch.norm(torch.zeros(len(model.bias)), 2)
    step = torch.norm(0.1 * torch.randn(size=(n,)), p=2)
    spectral_like = torch.norm(model.weight, 2)
    return iso, unit, step, spectral_like
""", count=5)]


_FULL_REDUCTIONS = frozenset({"norm", "sum", "mean", "prod", "max", "min", "amax", "amin", "std", "var"})
_ONE_D = frozenset({"torch.arange", "torch.linspace", "torch.logspace"})
# Factories whose shape is their size arguments: one int positional size (``torch.ones(n)``), or a
# one-element shape (``size=(n,)``, ``torch.full((n,), v)``), gives a 1-D tensor.
_SIZED = frozenset({"torch.ones", "torch.zeros", "torch.empty", "torch.rand", "torch.randn", "torch.full"})


def keyword_size(call: ast.Call) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == "size"), None)


def _number(expr: ast.AST) -> bool:
    return isinstance(expr, ast.Constant) and isinstance(expr.value, (int, float)) and not isinstance(expr.value, bool)


@follows_definitions(False)
def _int_size(expr: ast.AST, ctx: FileContext, depth: int = 3) -> bool:
    """One size that is an int, not a shape: a literal, ``len(...)``, ``int(...)``, ``x.numel()``,
    ``x.shape[i]`` / ``x.size(i)``, arithmetic on those, or a name bound only to such values."""
    if depth < 0:
        return False
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, int) and not isinstance(expr.value, bool)
    if isinstance(expr, ast.BinOp):
        return _int_size(expr.left, ctx, depth - 1) and _int_size(expr.right, ctx, depth - 1)
    if isinstance(expr, ast.Subscript):
        return isinstance(expr.value, ast.Attribute) and expr.value.attr == "shape" and not isinstance(
            expr.slice, ast.Slice)
    if isinstance(expr, ast.Call):
        if isinstance(expr.func, ast.Name):
            return expr.func.id in ("len", "int")
        return isinstance(expr.func, ast.Attribute) and (
            expr.func.attr == "numel" or (expr.func.attr == "size" and len(expr.args) == 1))
    if isinstance(expr, ast.Name):
        values = [v for _, v in ctx.bindings(expr)]
        return bool(values) and all(v is not None and _int_size(v, ctx, depth - 1) for v in values)
    return False


def _numeric_two(p: ast.AST) -> bool:
    """``2`` / ``2.0`` (also a name or expression lint cannot evaluate: it may be 2)."""
    if isinstance(p, ast.Constant):
        return not isinstance(p.value, str) and p.value == 2
    if isinstance(p, ast.Call) and isinstance(p.func, ast.Name) and p.func.id == "float" and len(p.args) == 1 \
            and isinstance(p.args[0], ast.Constant):
        return str(p.args[0].value).strip() in ("2", "2.0")  # float('inf'), float('-inf')
    if isinstance(p, ast.Attribute) and p.attr == "inf" or isinstance(p, ast.UnaryOp):
        return False  # math.inf, -1
    return True


def _one_dimensional(expr: ast.AST | None, ctx: FileContext) -> bool:
    """An input known to be 1-D: ``torch.arange`` / ``linspace``, or ``torch.stack`` of full reductions
    (``torch.stack([g.norm() for g in grads])``)."""
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Mult, ast.Add, ast.Sub, ast.Div)):
        return ((_one_dimensional(expr.left, ctx) and _number(expr.right))  # ``0.5 * torch.ones(n)``
                or (_one_dimensional(expr.right, ctx) and _number(expr.left)))
    if not isinstance(expr, ast.Call):
        return False
    qn = ctx.call_name(expr)
    if qn in _ONE_D:
        return True
    if qn in _SIZED:
        sizes = expr.args[:1] if qn == "torch.full" else expr.args
        size = keyword_size(expr)
        given = [*sizes, *([size] if size is not None else [])]
        if len(given) != 1:
            return False
        if isinstance(given[0], (ast.Tuple, ast.List)):  # ``size=(n,)``: a one-element shape
            return len(given[0].elts) == 1 and _int_size(given[0].elts[0], ctx)
        return qn != "torch.full" and size is None and _int_size(given[0], ctx)  # ``torch.ones(n)``
    if qn != "torch.stack" or not expr.args or len(expr.args) > 1 and not is_const(expr.args[1], 0):
        return False
    items = expr.args[0]
    elts = [items.elt] if isinstance(items, (ast.ListComp, ast.GeneratorExp)) else \
        items.elts if isinstance(items, (ast.List, ast.Tuple)) else []
    return bool(elts) and all(isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute)
                              and e.func.attr in _FULL_REDUCTIONS and not e.args and not e.keywords for e in elts)
