from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import OPTIMIZER, FileContext, keyword
from torchpact.lint.edits import Edit
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules.autograd._util import creates_grad_leaf, is_parameter_call, is_torch_factory, name_key

DTYPE_METHODS = {"double": "float64", "half": "float16", "bfloat16": "bfloat16"}
FLOAT_DTYPES = {"float32", "float", "float64", "double", "float16", "half", "bfloat16"}
SAME_DTYPE = {"float": "float32", "double": "float64", "half": "float16"}
# Factories whose values do not depend on the device / dtype they are made in, so moving
# ``device=`` / ``dtype=`` into them is exact. Random ones draw other numbers per device and dtype;
# ``torch.tensor([0.1]).double()`` is not ``torch.tensor([0.1], dtype=torch.float64)``; ``arange`` /
# ``linspace`` compute in the target dtype.
DEVICE_EXACT = {"zeros", "ones", "full", "empty", "eye", "tensor", "as_tensor"}
DTYPE_EXACT = {"zeros", "ones", "empty", "eye"}
# Methods whose result is a converted copy (or the tensor itself): the calls this rule looks at.
CONVERSIONS = ("to", "cuda", "double", "half", "bfloat16", "float")


class RequiresGradMadeNonLeaf(Rule):
    """A `requires_grad=True` tensor is converted in the same expression, so the name holds a non-leaf copy.

    ## What it does
    Flags `w = torch.randn(3, requires_grad=True).to(device)` (also `.cuda()`, `.double()`, `.half()`,
    `.bfloat16()`, `.to(torch.float64)`, and `nn.Parameter(...).to(device)`) when the gradient of `w`
    is wanted: `w.grad` is read or `w` is handed to a `torch.optim` optimizer in the same function
    (module, or class for `self.w`), the expression is passed to an optimizer directly, or an
    `nn.Parameter` conversion is stored on `self`. Conversions that cannot change the tensor
    (`.to("cpu")`, `.float()` on a float32 tensor, `.to(device)` when the factory already got
    `device=`) are not flagged.

    ## Why is this bad?
    The leaf that requires grad is the tensor the factory made; the conversion returns a new tensor
    computed from it (`w.is_leaf` is False, `w.grad_fn` is `ToCopyBackward0`). On torch 2.13
    `backward()` fills only the anonymous leaf's `.grad`, so `w.grad` stays `None` (with torch's
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed" warning), and
    `torch.optim.SGD([w])` raises `ValueError: can't optimize a non-leaf Tensor`. For
    `nn.Parameter(...).to(device)` the result is a plain `Tensor`, not a `Parameter`, so a module
    does not register it and never trains it. Honest caveat: a conversion that changes nothing
    returns the tensor itself — `.to("cpu")` on a CPU tensor, or `.to(device)` when `device` is the
    CPU — so such code works on a CPU-only machine and breaks once `device` is a GPU.

    ## Fix safety
    The fix makes the converted tensor the leaf without changing any value: for a deterministic
    factory and an unambiguous target it moves the target into the factory
    (`torch.zeros(3, device=device, requires_grad=True)`; a device for `zeros`/`ones`/`full`/`empty`/
    `eye`/`tensor`, a dtype only for `zeros`/`ones`/`empty`/`eye`); otherwise it converts first and
    then calls `.requires_grad_()` (`torch.randn(3).to(device).requires_grad_()` — not
    `torch.randn(3, device=device)`, which draws different random numbers, nor
    `torch.tensor([0.1], dtype=torch.float64)`, which is not `torch.tensor([0.1]).double()`), and for
    `nn.Parameter(x).to(device)` it converts the data: `nn.Parameter(x.to(device))`.
    """

    code = "TP203"
    category = Category.AUTOGRAD
    severity = Severity.ERROR
    message = ("`requires_grad=True` tensor converted in the same expression: the name holds a non-leaf copy, "
               "its `.grad` stays None and optimizers refuse it")
    fix_hint = ("create the tensor on the target device/dtype (`torch.zeros(3, device=device, requires_grad=True)`) "
                "or call `.requires_grad_()` after the conversion")
    nodes = (ast.Call,)
    calls = frozenset(CONVERSIONS)
    requires = (
        "the converted value is a resolved factory call with `requires_grad=True` or an `nn.Parameter`",
        "the conversion returns a new tensor (a dtype, `.cuda()`, a device string; `.to(device)` only "
        "on the paths where the device is not the CPU)",
        "its gradient is wanted: `.grad` is read or it goes to a `torch.optim` optimizer",
    )
    triggers = ("requires_grad", "Parameter")
    fixable = True
    unsafe_fix = True  # see Fix safety: applied only with --unsafe-fixes
    facts = ("conversion-makes-non-leaf",)

    valid = [
        """
import torch
w = torch.zeros(3, device=device, requires_grad=True)
v = torch.randn(3).to(device).requires_grad_()
u = torch.randn(3, requires_grad=True).to("cpu")
optimizer = torch.optim.SGD([w, v, u], lr=0.1)
""",
        """
import torch

def gradient_penalty(critic, real):
    x = torch.rand(real.shape, requires_grad=True).to(real.device)
    grads = torch.autograd.grad(critic(x).sum(), x, create_graph=True)[0]
    return grads.norm()
""",
        """
import torch
z = torch.zeros(3, device=device, requires_grad=True).to(device)
h = torch.zeros(3, requires_grad=True).float()
print(z.grad, h.grad)
""",
    ]
    invalid = [
        Invalid(
            """
import torch
w = torch.zeros(3, 4, requires_grad=True).to("cuda:0")
b = torch.zeros(4, requires_grad=True).cuda()
optimizer = torch.optim.SGD([w, b], lr=0.1)
""",
            fixed="""
import torch
w = torch.zeros(3, 4, device="cuda:0", requires_grad=True)
b = torch.zeros(4, device="cuda", requires_grad=True)
optimizer = torch.optim.SGD([w, b], lr=0.1)
""",
            count=2,
            evidence=Evidence.MUST,
        ),
        Invalid(
            """
import torch
w = torch.zeros(3, 4, requires_grad=True).to(device)
optimizer = torch.optim.SGD([w], lr=0.1)
""",
            fixed="""
import torch
w = torch.zeros(3, 4, device=device, requires_grad=True)
optimizer = torch.optim.SGD([w], lr=0.1)
""",
            severity=Severity.WARNING,  # on the paths where `device` is not the CPU
            evidence=Evidence.MAY,
        ),
        Invalid(
            """
import torch as th

def fit(x, y):
    w = th.randn(3, requires_grad=True).double()
    loss = ((x @ w - y) ** 2).mean()
    loss.backward()
    return w.grad
""",
            fixed="""
import torch as th

def fit(x, y):
    w = th.randn(3).double().requires_grad_()
    loss = ((x @ w - y) ** 2).mean()
    loss.backward()
    return w.grad
""",
        ),
        Invalid(
            """
import torch
from torch import nn

class Head(nn.Module):
    def __init__(self, dim, device):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim)).to(device)
""",
            fixed="""
import torch
from torch import nn

class Head(nn.Module):
    def __init__(self, dim, device):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim).to(device))
""",
            severity=Severity.WARNING,
        ),
        Invalid(
            """
import torch
from torch.optim import Adam
opt = Adam([torch.tensor([0.1, 0.2], requires_grad=True).to(torch.float64)])
""",
            fixed="""
import torch
from torch.optim import Adam
opt = Adam([torch.tensor([0.1, 0.2]).to(torch.float64).requires_grad_()])
""",
        ),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if not _conversion(node):
            return
        parent = ctx.parent(node)
        if isinstance(parent, ast.Attribute) and isinstance(ctx.parent(parent), ast.Call) \
                and _conversion(ctx.parent(parent)) and ctx.parent(parent).func is parent:
            return  # report the outermost conversion of a chain once
        chain = [node]
        base = node.func.value  # type: ignore[attr-defined]
        while isinstance(base, ast.Call) and _conversion(base):
            chain.append(base)
            base = base.func.value  # type: ignore[attr-defined]
        if not creates_grad_leaf(ctx, base, chains=False):
            return
        if not (is_parameter_call(ctx, base) or is_torch_factory(ctx, base)):
            return
        assert isinstance(base, ast.Call)
        changing = [conv for conv in chain if _changes(ctx, base, conv)]
        if not changing:
            return
        if not self._gradient_wanted(node, base, ctx):
            return
        if not any(_certainly_changes(ctx, conv) for conv in changing):
            ctx.note(Evidence.MAY, "the device may be the CPU, where `.to()` returns the leaf itself")
        edits = self._fix(ctx, node, list(reversed(chain)), base)
        yield self.hit(node, subject=_target_text(ctx, node), edits=edits, evidence=Evidence.MUST)

    # ------------------------------------------------------------------ evidence
    def _gradient_wanted(self, node: ast.Call, base: ast.Call, ctx: FileContext) -> bool:
        parent = ctx.parent(node)
        while isinstance(parent, (ast.List, ast.Tuple)):
            parent = ctx.parent(parent)
        if isinstance(parent, ast.Call) and parent is not node and OPTIMIZER in ctx.kinds(parent):
            return True
        stmt = ctx.parent(node)
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and stmt.value is node):
            return False
        target = stmt.targets[0]
        key = name_key(target)
        if key is None:
            return False
        if is_parameter_call(ctx, base) and key.startswith("self.") and ctx.enclosing_class(node) is not None:
            return True  # meant as a registered parameter; a plain tensor is not one
        region = ctx.enclosing_class(node) if key.startswith("self.") else ctx.scope(node)
        return _grad_read_or_optimized(ctx, region or ctx.tree, key)

    # ------------------------------------------------------------------ fix
    def _fix(self, ctx: FileContext, node: ast.Call, chain: list[ast.Call], base: ast.Call) -> list[Edit]:
        loc = ctx.locator
        if is_parameter_call(ctx, base):
            if not base.args:
                return []
            data = base.args[0]
            text = loc.source(data)
            if not isinstance(data, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
                text = f"({text})"
            convs = "".join(_suffix(ctx, c) for c in chain)
            source, old = loc.source(base), loc.source(data)
            new_base = source.replace(old, text + convs, 1) if source.count(old) == 1 else None
            return [loc.replace(node, new_base)] if new_base else []
        factory = (ctx.call_name(base) or "").rsplit(".", 1)[-1]
        kw_rg = next(k for k in base.keywords if k.arg == "requires_grad")
        moved = _as_kwargs(ctx, base, chain, factory)
        others = [loc.source(a) for a in base.args] + [
            loc.source(k) for k in base.keywords if k is not kw_rg]
        func = loc.source(base.func)
        if moved is not None:
            return [loc.replace(node, f"{func}({', '.join(others + moved + ['requires_grad=True'])})")]
        convs = "".join(_suffix(ctx, c) for c in chain)
        return [loc.replace(node, f"{func}({', '.join(others)}){convs}.requires_grad_()")]


def _conversion(call: ast.AST) -> bool:
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr in CONVERSIONS)


def _dtype_name(ctx: FileContext, expr: ast.AST | None) -> str | None:
    qn = ctx.resolve(expr) if expr is not None else None
    if qn and qn.startswith("torch.") and qn.count(".") == 1 and qn[6:] in FLOAT_DTYPES:
        name = qn[6:]
        return SAME_DTYPE.get(name, name)
    return None


def _to_args(ctx: FileContext, conv: ast.Call) -> tuple[ast.AST | None, ast.AST | None, bool]:
    """(device expr, dtype expr, clean) of ``.to(...)``; clean is False for anything else in it."""
    device = keyword(conv, "device")
    dtype = keyword(conv, "dtype")
    clean = all(k.arg in ("device", "dtype") for k in conv.keywords) and len(conv.args) <= 2
    for a in conv.args:
        if _dtype_name(ctx, a) is not None or (isinstance(a, (ast.Name, ast.Attribute)) and "dtype" in ctx.segment(a)):
            dtype = a
        elif device is None:
            device = a
        else:
            clean = False
    return device, dtype, clean


def _is_cpu(expr: ast.AST | None) -> bool:
    return isinstance(expr, ast.Constant) and isinstance(expr.value, str) and expr.value.startswith("cpu")


def _changes(ctx: FileContext, base: ast.Call, conv: ast.Call) -> bool:
    """Whether this conversion can return a new tensor (rather than the leaf itself)."""
    made_dtype = _dtype_name(ctx, keyword(base, "dtype")) or ("float32" if keyword(base, "dtype") is None else None)
    made_on = keyword(base, "device")
    attr = conv.func.attr  # type: ignore[attr-defined]
    if is_parameter_call(ctx, base):
        made_dtype, made_on = None, None
    if attr == "cuda":
        return made_on is None
    if attr in DTYPE_METHODS:
        return made_dtype is not None and made_dtype != DTYPE_METHODS[attr]
    if attr == "float":
        return made_dtype is not None and made_dtype != "float32"
    device, dtype, _ = _to_args(ctx, conv)
    if dtype is not None and (d := _dtype_name(ctx, dtype)) is not None and made_dtype is not None and d != made_dtype:
        return True
    if device is not None and made_on is None and not _is_cpu(device):
        return True
    return False


def _certainly_changes(ctx: FileContext, conv: ast.Call) -> bool:
    """A conversion ``_changes`` allows that changes the tensor whatever the values: a dtype, ``.cuda()``,
    a device written as a string; ``.to(device)`` returns the leaf itself when ``device`` is the CPU."""
    if conv.func.attr != "to":  # type: ignore[attr-defined]
        return True
    device, dtype, _ = _to_args(ctx, conv)
    return _dtype_name(ctx, dtype) is not None or (isinstance(device, ast.Constant) and isinstance(device.value, str))


def _suffix(ctx: FileContext, conv: ast.Call) -> str:
    """The conversion as written: ``.to(device)``."""
    return ctx.locator.source(conv)[len(ctx.locator.source(conv.func.value)):]  # type: ignore[attr-defined]


def _as_kwargs(ctx: FileContext, base: ast.Call, chain: list[ast.Call], factory: str) -> list[str] | None:
    """``device=...`` / ``dtype=...`` equivalent to the chain, when that is unambiguous and exact."""
    if factory not in DEVICE_EXACT or any(k.arg is None for k in base.keywords):
        return None  # ``**kwargs`` may already hold device / dtype
    device: str | None = None
    dtype: str | None = None
    torch_name = _torch_root(base.func)
    for conv in chain:
        attr = conv.func.attr  # type: ignore[attr-defined]
        if attr == "cuda":
            if conv.args or conv.keywords:
                return None
            device = '"cuda"'
        elif attr in DTYPE_METHODS or attr == "float":
            if torch_name is None:
                return None
            dtype = f"{torch_name}.{DTYPE_METHODS.get(attr, 'float32')}"
        else:
            dev, dt, clean = _to_args(ctx, conv)
            if not clean:
                return None
            if dev is not None:
                text = ctx.segment(dev)
                if not (isinstance(dev, ast.Constant) and isinstance(dev.value, str)) and "dev" not in text:
                    return None  # ``.to(x)``: a device, a dtype or a tensor? not knowable here
                device = text
            if dt is not None:
                dtype = ctx.segment(dt)
    if (device is not None and keyword(base, "device") is not None) or (
            dtype is not None and keyword(base, "dtype") is not None):
        return None
    if dtype is not None and factory not in DTYPE_EXACT:
        return None
    return [f"{k}={v}" for k, v in (("device", device), ("dtype", dtype)) if v is not None]


def _torch_root(func: ast.AST) -> str | None:
    cur = func
    while isinstance(cur, ast.Attribute):
        cur = cur.value
    if isinstance(cur, ast.Name) and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return cur.id
    return None


def _target_text(ctx: FileContext, node: ast.Call) -> str | None:
    stmt = ctx.parent(node)
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        return ctx.segment(stmt.targets[0])
    return None


def _grad_read_or_optimized(ctx: FileContext, region: ast.AST, key: str) -> bool:
    """``key.grad`` is read, or ``key`` is in a list handed to an optimizer, within ``region``."""
    lists: set[str] = set()
    for n in ast.walk(region):
        if isinstance(n, ast.Assign) and isinstance(n.value, (ast.List, ast.Tuple)) and \
                any(name_key(e) == key for e in n.value.elts):
            lists.update(k for t in n.targets if (k := name_key(t)))
    for n in ast.walk(region):
        if (isinstance(n, ast.Attribute) and n.attr == "grad" and isinstance(n.ctx, ast.Load)
                and name_key(n.value) == key):
            return True
        if isinstance(n, ast.Call) and OPTIMIZER in ctx.kinds(n):
            for a in [*n.args, *(k.value for k in n.keywords if k.arg == "params")]:
                if isinstance(a, (ast.List, ast.Tuple)) and any(name_key(e) == key for e in a.elts):
                    return True
                if name_key(a) in lists:
                    return True
    return False
