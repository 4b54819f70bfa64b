from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules._api import respell
from torchpact.lint.rules.numerics._away_from_zero import zero_or_at_least_one
from torchpact.lint.rules.numerics._integers import whole_numbers


def is_one(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float) and node.value == 1


class LogOfOnePlus(Rule):
    """`torch.log(1 + x)` is computed instead of `torch.log1p(x)`.

    ## What it does
    Flags `torch.log(1 + x)` and `torch.log(x + 1)` (TorchFix TOR106). The loss of precision needs
    `|x|` below about the float's epsilon relative to 1; where the code shows that `x` can be that
    small — `x` is an `exp(...)` (the softplus `log(1 + exp(z))` for very negative `z`), a sigmoid
    or softmax probability, or a product with a constant below `1e-3` — the finding says so. Elsewhere
    (a width over a scale, a count) nothing says `x` is small, and the finding is a hint:
    `log1p` is never less accurate, and the rewrite is free.

    The condition it needs: `x` may hold small fractions. Only floating values round: `1 + x` is
    exact for a whole number, so `x` known to hold whole numbers — an integer dtype (`torch.randint`,
    `torch.arange` of ints, `.long()`, `dtype=torch.int64`, a count such as `len(...)` or
    `.size(0)`), or the result of `floor` / `ceil` / `round`, the indices or counts torch functions
    return (`bincount`, `argmax`, `topk` / `sort` indices, `unique(..., return_counts=True)` counts,
    `searchsorted`), or what a function of this file returns when every return is one of those — is
    not flagged (`_integers.py`). Nor a float tensor that holds whole numbers: `torch.arange` with
    whole start and step whatever its `dtype=`, `.to(torch.float32)` / `.float()` of whole values
    (an integer converted to a float stays an integer), `torch.meshgrid` (or a project function that
    returns it, such as an `ndgrid` helper), `stack` / `cat`, differences, `abs`, `permute` /
    `reshape` / `flatten` of those (relative-position tables built from index grids), einops'
    `rearrange` / `repeat` of them (which only move or copy entries: `pos = rearrange(torch.arange(-n +
    1, n).float(), "... -> ... 1")`) and its `reduce` by `sum` / `max` / `min` / `prod`. A true
    division, a factor that is not whole, or an in-place change (`x[:, 0] /= n`, `x.div_(n)`) that
    can run before the read (not on a branch that excludes it) makes them fractional again. Nor is
    `x` whose entries are each exactly 0 or at least 1, which `1 + x` cannot round away: `exp` of a
    value that is non-negative or masked to `-inf` (`t[t < 0] = -inf`, `masked_fill`,
    `torch.where`), `1 + softplus(z)`, a `clamp(min=1)`, and sums and products of those
    (`_away_from_zero.py`). The rule needs `x` that can be a nonzero value below about eps.

    ## Why is this bad?
    For small `x`, `1 + x` rounds to 1 before the log is taken: on torch 2.13, in float32,
    `torch.log(1 + 1e-10)` is exactly `0.` while `torch.log1p(1e-10)` is `1e-10`. In float16 or
    bfloat16 the loss of precision starts around `1e-3`. For `x` of order 1 or more the two agree to
    rounding.

    ## Fix safety
    The fix rewrites the call to `torch.log1p(x)`, which computes the same function without the
    intermediate rounding: where `1 + x` was exact the results agree to rounding (they may differ in
    the last bit: two implementations, both within one ulp on whole float32 values) and elsewhere
    `log1p` is more accurate.
    """

    code = "TP319"
    category = Category.NUMERICS
    severity = Severity.INFO
    requires = (
        "the `log` resolves to `torch.log` and its argument adds 1",
    )
    message = ("`torch.log(1 + x)` rounds `1 + x` before the log: `torch.log1p(x)` is never less accurate, and "
               "stays exact where |x| is below float epsilon (nothing here says x gets that small)")
    fix_hint = "use `torch.log1p(x)`"
    nodes = (ast.Call,)
    calls = frozenset({"log"})
    triggers = ("log",)
    fixable = True

    valid = ["""
import torch
y = torch.log1p(x)
z = torch.log(2 + x)
w = torch.log(x) + 1
""", """
import torch
positions = torch.arange(seq_len)
bias = torch.log(1 + positions)
""", """
import torch
buckets = torch.floor(position_ids / window)
scale = 1 + torch.log(1 + buckets)
""", """
import torch
counts = (labels == target).sum(dim=0)
weights = torch.log(counts.long() + 1)
""", """
import torch
def idf(doc_freq: torch.Tensor, n_docs: int):
    df = doc_freq.to(torch.int64)
    return torch.log(n_docs + 1) - torch.log(df.clamp(min=0) + 1)
""", """
import torch
ids = torch.zeros(4, dtype=torch.long)
tokens = torch.log(1 + ids.size(0))
""", """
import torch

def durations(tokens):
    _, counts = torch.unique_consecutive(tokens, return_counts=True)
    return counts

def log_durations(tokens):
    dur = durations(tokens)
    return torch.log(dur + 1)

class Ranker:
    def positions(self, scores):
        return torch.argmax(scores, dim=-1)

    def features(self, scores, k, edges):
        top = torch.topk(scores, k).indices
        _, order = scores.sort(dim=-1)
        hist = torch.bincount(self.positions(scores))
        uniq, inverse, counts = torch.unique(scores, return_inverse=True, return_counts=True)
        nearest = torch.max(scores, dim=1)[1]
        return (torch.log(1 + top) + torch.log(order + 1) + torch.log(1 + hist) + torch.log(inverse + 1)
                + torch.log(counts + 1) + torch.log(1 + nearest) + torch.log(torch.searchsorted(edges, scores) + 1))
""", """
import torch
import torch.nn.functional as F

def manifold_term(sim, margin):
    z = sim - margin
    z[z < 0] = float("-inf")
    return torch.log(1 + torch.sum(torch.exp(z), dim=1))

def masked_term(sim):
    z = sim.masked_fill(sim < 0, -torch.inf)
    return torch.log(torch.exp(z).sum(-1) + 1)

def kept_term(sim):
    z = torch.where(sim >= 0, sim, float("-inf"))
    return torch.log(1 + z.exp().sum(dim=1))

def clamped_term(d):
    return torch.log(1 + torch.exp(d.clamp(min=0)))

def shifted_softplus(s):
    return torch.log(1 + (1 + F.softplus(s)))
""", """
import math
from typing import Tuple
import torch

def ndgrid(*tensors):
    return torch.meshgrid(*tensors, indexing="ij")

def log_coords(win: Tuple[int, int], mode: str, device=None):
    rows = torch.arange(-(win[0] - 1), win[0], device=device).to(torch.float32)
    cols = torch.arange(-(win[1] - 1), win[1], device=device).to(dtype=torch.float32)
    table = torch.stack(torch.meshgrid(rows, cols, indexing="ij")).permute(1, 2, 0).contiguous()
    if mode == "swin":
        table[:, :, 0] /= win[0] - 1
        return torch.sign(table) * torch.log2(1.0 + table.abs()) / math.log2(8)
    return torch.sign(table) * torch.log(1.0 + table.abs())

class Bias:
    def pairs(self, n):
        grid = torch.stack(ndgrid(torch.arange(n, dtype=torch.float32),
                                  torch.arange(self.size, dtype=torch.float32))).flatten(1)
        rel = (grid[:, :, None] - grid[:, None, :]).permute(1, 2, 0).reshape(-1, 2).float()
        return torch.log(1 + torch.abs(rel)), torch.log(torch.cat([rel, -rel]).abs() + 1)

def offsets(n: int):
    steps = torch.arange(0, 2 * n, 2).double() - n
    for _ in range(3):
        steps *= 2
    return torch.log(1 + steps.abs().type(torch.float16))
""", """
import torch
from einops import rearrange
def distance_feats(n: int, device=None):
    pos = torch.arange(-n + 1, n, device=device).float()
    pos = rearrange(pos, "... -> ... 1")
    return torch.sign(pos) * torch.log(pos.abs() + 1)
""", """
import einops
from torch import arange, log
def table(seq):
    n = seq.shape[1]
    offs = einops.repeat(arange(start=0, end=n).to(dtype=seq.dtype), "j -> i j", i=n)
    return log(1 + offs)
""", """
import torch
from einops import reduce
def log_counts(labels, classes: int):
    out = []
    for k in range(classes):
        hits = reduce((labels == k).float(), "b n -> b", reduction="sum")
        out.append(torch.log(hits + 1))
    return out
""", """
import torch
from einops import rearrange
def offsets(width: int):
    return rearrange(torch.arange(width).double() - width // 2, "w -> 1 w")

def bias(width: int, use_log: bool):
    rel = offsets(width)
    if use_log:
        rel = torch.log(1 + rel.abs())
    return rel
""", """
import torch
from einops import reduce
steps = torch.arange(0, 64, 4).float().view(4, 4)
peak = reduce(steps, "a b -> a", "max")
scale = torch.log(peak + 1)
"""]
    invalid = [
        Invalid("""
import torch
y = torch.log(1 + x)
z = torch.log(x.exp() + 1.0)
""", fixed="""
import torch
y = torch.log1p(x)
z = torch.log1p(x.exp())
""", count=2),
        Invalid("""
import torch
positions = torch.arange(seq_len) / seq_len
bias = torch.log(1 + positions)
""", fixed="""
import torch
positions = torch.arange(seq_len) / seq_len
bias = torch.log1p(positions)
"""),
        Invalid("""
import torch
buckets = position_ids / window
scale = 1 + torch.log(1 + buckets)
""", fixed="""
import torch
buckets = position_ids / window
scale = 1 + torch.log1p(buckets)
"""),
        Invalid("""
import torch
def idf(doc_freq: torch.Tensor, n_docs: int):
    df = doc_freq.float()
    return torch.log(df.clamp(min=0) + 1)
""", fixed="""
import torch
def idf(doc_freq: torch.Tensor, n_docs: int):
    df = doc_freq.float()
    return torch.log1p(df.clamp(min=0))
"""),
        Invalid("""
import torch
def softplus(z):
    return torch.log(1 + torch.exp(z))
""", fixed="""
import torch
def softplus(z):
    return torch.log1p(torch.exp(z))
"""),
        Invalid("""
import torch
def log_normalizer(a, b, sigma):
    return torch.log(1 + (b - a) / (2.5066 * sigma))
""", fixed="""
import torch
def log_normalizer(a, b, sigma):
    return torch.log1p((b - a) / (2.5066 * sigma))
"""),
        Invalid("""
import torch
penalty = torch.log(1e-6 * residual + 1)
odds = torch.log(torch.sigmoid(score) + 1)
""", fixed="""
import torch
penalty = torch.log1p(1e-6 * residual)
odds = torch.log1p(torch.sigmoid(score))
""", count=2),
        Invalid("""
import torch
import torch.nn.functional as F

def rate(x):
    return x.float() / x.sum()

def features(tokens, scores, sim, pad, s, k):
    uniq, _ = torch.unique_consecutive(tokens.float(), return_counts=True)
    vals, idx = torch.topk(scores, k)
    z = sim - 1.0
    z[z > 0] = float("-inf")
    w = sim.masked_fill(pad, -torch.inf)
    return (torch.log(1 + uniq) + torch.log(rate(tokens) + 1) + torch.log(1 + vals)
            + torch.log(1 + torch.exp(z).sum(1)) + torch.log(1 + w.exp().sum(1)) + torch.log(1 + F.softplus(s)))
""", fixed="""
import torch
import torch.nn.functional as F

def rate(x):
    return x.float() / x.sum()

def features(tokens, scores, sim, pad, s, k):
    uniq, _ = torch.unique_consecutive(tokens.float(), return_counts=True)
    vals, idx = torch.topk(scores, k)
    z = sim - 1.0
    z[z > 0] = float("-inf")
    w = sim.masked_fill(pad, -torch.inf)
    return (torch.log1p(uniq) + torch.log1p(rate(tokens)) + torch.log1p(vals)
            + torch.log1p(torch.exp(z).sum(1)) + torch.log1p(w.exp().sum(1)) + torch.log1p(F.softplus(s)))
""", count=6),
        Invalid("""
import torch

def scaled(win: int, scale):
    coords = torch.arange(-(win - 1), win).float()
    coords[:] /= win - 1
    half = torch.arange(win) * 0.5
    fine = torch.arange(0, 1, 0.1)
    ratio = torch.arange(win).float()
    for _ in range(2):
        total = torch.log(1 + coords.abs()) + torch.log(1 + half) + torch.log(fine + 1) + torch.log(1 + ratio)
        ratio.div_(scale)
    return total
""", fixed="""
import torch

def scaled(win: int, scale):
    coords = torch.arange(-(win - 1), win).float()
    coords[:] /= win - 1
    half = torch.arange(win) * 0.5
    fine = torch.arange(0, 1, 0.1)
    ratio = torch.arange(win).float()
    for _ in range(2):
        total = torch.log1p(coords.abs()) + torch.log1p(half) + torch.log1p(fine) + torch.log1p(ratio)
        ratio.div_(scale)
    return total
""", count=4),
        Invalid("""
import torch
from einops import rearrange, reduce, repeat
def feats(n: int, labels, temp):
    share = reduce((labels == 1).float(), "b n -> b", "mean")
    frac = rearrange(torch.arange(n) / n, "n -> n 1")
    warm = repeat(temp, "d -> b d", b=n)
    return torch.log(share + 1), torch.log(1 + frac), torch.log(warm + 1)
""", fixed="""
import torch
from einops import rearrange, reduce, repeat
def feats(n: int, labels, temp):
    share = reduce((labels == 1).float(), "b n -> b", "mean")
    frac = rearrange(torch.arange(n) / n, "n -> n 1")
    warm = repeat(temp, "d -> b d", b=n)
    return torch.log1p(share), torch.log1p(frac), torch.log1p(warm)
""", count=3),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if ctx.call_name(node) != "torch.log" or len(node.args) != 1 or node.keywords:
            return
        arg = node.args[0]
        if not (isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Add)):
            return
        other = arg.right if is_one(arg.left) else arg.left if is_one(arg.right) else None
        if other is None or whole_numbers(other, ctx) or zero_or_at_least_one(other, ctx):
            return  # 1 + a whole number, or 1 + (0 or >= 1), is exact to rounding: log1p gains nothing
        func = respell(node.func, ctx, "torch.log1p")
        edits = [ctx.locator.replace(node, f"{func}({ctx.locator.source(other)})")] if func else []
        small = _visibly_small(other, ctx)
        message = None if small is None else (
            f"`torch.log(1 + x)` loses precision here: x is {small}, which can fall below float epsilon, where "
            "1 + x rounds to 1 and the log gives 0")
        yield self.hit(node, edits=edits, message=message)


_SMALL_CALLS = {"exp": "an exp(...)", "sigmoid": "a sigmoid probability", "softmax": "a softmax probability"}


def _visibly_small(expr: ast.AST, ctx: FileContext) -> str | None:
    """What shows that ``expr`` can be tiny: an exp, a probability, a product with a tiny constant."""
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        return _visibly_small(expr.operand, ctx)
    if isinstance(expr, ast.Constant) and type(expr.value) in (int, float) and 0 < abs(expr.value) < 1e-3:
        return f"the constant {expr.value}"
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Mult, ast.Div)):
        factor = _visibly_small(expr.left, ctx) or (
            _visibly_small(expr.right, ctx) if isinstance(expr.op, ast.Mult) else None)
        return f"a product with {factor}" if factor else None
    if isinstance(expr, ast.Call):
        qn = ctx.call_name(expr)
        last = qn.rsplit(".", 1)[-1] if qn else (expr.func.attr if isinstance(expr.func, ast.Attribute) else "")
        if (qn is None or qn.startswith(("torch.", "math.", "numpy."))) and last in _SMALL_CALLS:
            return _SMALL_CALLS[last]
    return None
