"""Whether a tensor is already where a conversion (``.to(...)``, ``.cuda()``, ``.cpu()``) would put it.

``Tensor.to(device)`` returns the tensor itself, not a copy, when the tensor already has that device
(and ``.to(dtype)`` when it already has that dtype; ``.cuda()`` / ``.cpu()`` likewise): nothing is
moved, and a caller that drops the result loses nothing. Lint knows where a tensor lives when every
definition that reaches it was

- made with that placement spelled out: a factory given ``device=D`` / ``dtype=T`` (``torch.zeros(n,
  device=q.device)``), ``torch.*_like(q)`` (``q``'s device and dtype), a conversion ``.to(D)``,
  ``.cuda()``, ``.cpu()``;
- or, for the device only, computed by torch operations from such tensors (or from the tensor ``k``
  itself, when the target is ``k.device``) and from values that are no tensors at all (Python numbers,
  numpy scalars, ``math``/``numpy`` results, sizes). An operator or an elementwise/reduction function
  of tensors on device D and non-tensors returns its result on D, or raises: a number or numpy scalar
  becomes a CPU scalar that may join any device, a numpy array cannot join a tensor of another device.
  A tensor of unknown placement among the operands decides nothing: a 0-dim CPU tensor combined with a
  CUDA tensor gives a CUDA result.

Placements compare by what they are written as and by the definitions of the names they read, so
``device=q.device`` and ``.to(q.device)`` match only while ``q`` is the same binding. ``.cuda()`` and
``"cuda"`` name the current CUDA device; a ``torch.cuda.set_device`` between the two is not tracked.
"""

from __future__ import annotations

import ast
from typing import Hashable

from torchpact.lint.context import FileContext
from torchpact.lint.analysis.following import follows_definitions

Key = Hashable
_DEPTH = 10
_FACTORY_KEYWORDS = ("device", "dtype")
# Torch functions whose result lives where their tensor arguments live.
_SAME_DEVICE_FUNCTIONS = frozenset({
    "abs", "sqrt", "rsqrt", "exp", "expm1", "log", "log1p", "log2", "log10", "sin", "cos", "tan", "tanh",
    "sigmoid", "clamp", "clip", "where", "sum", "mean", "prod", "pow", "mul", "add", "sub", "div",
    "matmul", "mm", "bmm", "cat", "stack", "square", "sign", "floor", "ceil", "round", "neg", "reciprocal",
    "softmax", "log_softmax", "relu", "maximum", "minimum", "lgamma", "digamma", "erf", "atan2", "outer",
    "einsum", "cumsum", "flatten", "reshape", "transpose", "permute", "squeeze", "unsqueeze", "logsumexp",
})
_SAME_DEVICE_NAMESPACES = ("torch.", "torch.nn.functional.", "torch.special.")
_LIKE = frozenset({"zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like",
                   "randint_like"})
# Tensor methods whose result stays on the receiver's device (``type_as`` / ``type`` may move it).
_SAME_DEVICE_METHODS = frozenset({
    "float", "double", "half", "bfloat16", "long", "int", "bool", "byte", "clamp", "clip", "add", "sub",
    "mul", "div", "pow", "abs", "neg", "exp", "log", "sqrt", "sigmoid", "tanh", "relu", "softmax",
    "log_softmax", "matmul", "mm", "bmm", "mean", "sum", "prod", "norm", "detach", "contiguous", "view",
    "view_as", "reshape", "reshape_as", "squeeze", "unsqueeze", "permute", "transpose", "t", "flatten",
    "unflatten", "clone", "expand", "expand_as", "repeat", "narrow", "flip", "roll", "tril", "triu",
    "cumsum", "masked_fill", "index_fill", "gather", "eq", "ne", "gt", "ge", "lt", "le", "logical_not",
    "square", "reciprocal", "rsqrt", "round", "floor", "ceil", "sign", "new_zeros", "new_ones",
    "new_full", "new_empty", "abs_", "clamp_", "add_", "mul_", "sub_", "div_", "masked_fill_",
})
# Calls whose result is no tensor (a Python number, a numpy value or array, a size).
_SCALAR_CALLS = frozenset({"len", "int", "float", "bool"})
_SCALAR_METHODS = frozenset({"item", "size", "dim", "numel", "tolist"})


def already_placed(call: ast.Call, ctx: FileContext) -> bool:
    """Whether the conversion ``call`` (``x.to(T)``, ``x.cuda()``, ``x.cpu()``) would return ``x`` itself:
    every definition reaching ``x`` is known to have the placement it asks for (see above)."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    if any(k.arg not in ("non_blocking", "device", "dtype") for k in call.keywords):
        return False  # ``copy=True`` copies; ``memory_format`` may
    if func.attr in ("cuda", "cpu"):
        if call.args or any(k.arg != "non_blocking" for k in call.keywords):
            return False  # ``.cuda(1)``: which device is the current one is not known
        target: Key = ("const", func.attr)
        return target in _device_keys(func.value, ctx, _DEPTH)
    if func.attr != "to":
        return False
    targets = [*call.args, *(k.value for k in call.keywords if k.arg in ("device", "dtype"))]
    if len(targets) != 1:
        return False  # ``.to(device, dtype)``: both would have to match
    key = _key(targets[0], ctx)
    if key is None:
        return False
    return key in _device_keys(func.value, ctx, _DEPTH) or key in _made_with(func.value, ctx, "dtype")


def _key(expr: ast.AST, ctx: FileContext) -> Key | None:
    """What a placement is written as: ``k.device`` is the device of ``k``'s reaching definitions, a string
    constant is itself, a name or attribute is its text and the definitions of its root name."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        value = expr.value
        return ("const", "cuda" if value == "cuda" else value)
    if isinstance(expr, ast.Attribute) and expr.attr == "device" and isinstance(expr.value, ast.Name):
        return ("of", _binding_ids(expr.value, ctx))
    if isinstance(expr, ast.Attribute) and expr.attr == "dtype" and isinstance(expr.value, ast.Name):
        return ("dtype_of", _binding_ids(expr.value, ctx))
    root = expr
    while isinstance(root, ast.Attribute):
        root = root.value
    if isinstance(root, ast.Name):
        return ("expr", ctx.locator.source(expr), _binding_ids(root, ctx))
    return None


def _binding_ids(name: ast.AST, ctx: FileContext) -> frozenset[int]:
    return frozenset(id(owner) for owner, _ in ctx.bindings(name))


def _made_with(expr: ast.AST, ctx: FileContext, keyword: str) -> frozenset[Key]:
    """The placements (``dtype`` here) every definition of the name ``expr`` was created with."""
    if not isinstance(expr, ast.Name):
        return frozenset()
    binds = ctx.bindings(expr)
    found: frozenset[Key] | None = None
    for _, value in binds:
        keys = frozenset()
        if isinstance(value, ast.Call):
            keys = frozenset(k for k in (_key(kw.value, ctx) for kw in value.keywords if kw.arg == keyword)
                             if k is not None)
            name = ctx.call_name(value) or ""
            if name.rpartition(".")[2] in _LIKE and value.args and isinstance(value.args[0], ast.Name) \
                    and not any(kw.arg == keyword for kw in value.keywords):
                keys = frozenset({("dtype_of", _binding_ids(value.args[0], ctx))})
        found = keys if found is None else found & keys
    return found or frozenset()


@follows_definitions(frozenset())
def _device_keys(expr: ast.AST | None, ctx: FileContext, depth: int) -> frozenset[Key]:
    """The placements ``expr``'s device is known to equal; empty when unknown. ``depth`` counts the
    definitions followed, not the nesting of one expression."""
    if expr is None or depth <= 0:
        return frozenset()
    if not isinstance(expr, ast.Name):
        return _judge(expr, ctx, depth)
    memo_key = ("device_keys", id(expr))
    known = ctx.memo.get(memo_key)
    if known is not None:
        return known  # type: ignore[no-any-return]
    ctx.memo[memo_key] = frozenset()  # in progress: a loop-carried ``x = x * 2`` proves nothing
    binds = ctx.bindings(expr)
    found: frozenset[Key] = frozenset()
    if binds:
        shared: frozenset[Key] | None = None
        for _, value in binds:
            keys = _device_keys(value, ctx, depth - 1) if isinstance(value, ast.expr) else frozenset()
            shared = keys if shared is None else shared & keys
        found = frozenset({("of", frozenset(id(owner) for owner, _ in binds))}) | (shared or frozenset())
    ctx.memo[memo_key] = found
    return found


def _judge(expr: ast.AST, ctx: FileContext, depth: int) -> frozenset[Key]:
    if isinstance(expr, ast.Subscript):
        return _device_keys(expr.value, ctx, depth)  # an index tensor on the CPU may index any device
    if isinstance(expr, ast.UnaryOp):
        return _device_keys(expr.operand, ctx, depth)
    if isinstance(expr, ast.BinOp):
        return _combined([expr.left, expr.right], ctx, depth)
    if isinstance(expr, ast.IfExp):
        return _device_keys(expr.body, ctx, depth) & _device_keys(expr.orelse, ctx, depth)
    if isinstance(expr, ast.Call):
        return _call(expr, ctx, depth)
    return frozenset()


def _call(call: ast.Call, ctx: FileContext, depth: int) -> frozenset[Key]:
    func = call.func
    name = ctx.call_name(call)
    if name is not None:
        namespace, _, last = name.rpartition(".")
        placed = [kw.value for kw in call.keywords if kw.arg == "device"]
        if placed and namespace + "." in _SAME_DEVICE_NAMESPACES:
            key = _key(placed[0], ctx)  # a factory (or any torch function) told where to put its result
            return frozenset({key}) if key is not None else frozenset()
        if namespace + "." in _SAME_DEVICE_NAMESPACES and (last in _SAME_DEVICE_FUNCTIONS or last in _LIKE):
            args = [a.value if isinstance(a, ast.Starred) else a for a in call.args]
            if last in _LIKE:
                args = args[:1]
            return _combined(args + [kw.value for kw in call.keywords if kw.arg not in ("dim", "out")], ctx, depth)
        return frozenset()
    if not isinstance(func, ast.Attribute):
        return frozenset()
    if func.attr in ("cuda", "cpu") and not call.args and all(k.arg == "non_blocking" for k in call.keywords):
        return frozenset({("const", func.attr)})
    if func.attr == "to":
        targets = [*call.args, *(k.value for k in call.keywords if k.arg == "device")]
        if len(targets) == 1:
            key = _key(targets[0], ctx)
            is_device = isinstance(targets[0], ast.Constant) or (
                isinstance(targets[0], ast.Attribute) and targets[0].attr == "device") or any(
                k.arg == "device" for k in call.keywords)
            if key is not None and is_device:
                return frozenset({key})
        return frozenset()
    if func.attr in _SAME_DEVICE_METHODS:
        return _combined([func.value, *call.args, *(k.value for k in call.keywords)], ctx, depth)
    return frozenset()


def _combined(operands: list[ast.expr], ctx: FileContext, depth: int) -> frozenset[Key]:
    """Operands of one operation: the tensors' common placement, non-tensors ignored, unknowns fatal."""
    found: frozenset[Key] | None = None
    for operand in operands:
        if _no_tensor(operand, ctx, depth):
            continue
        keys = _device_keys(operand, ctx, depth)
        if not keys:
            return frozenset()
        found = keys if found is None else found & keys
    return found or frozenset()


@follows_definitions(False)
def _no_tensor(expr: ast.AST, ctx: FileContext, depth: int) -> bool:
    """Whether ``expr`` is known to hold no torch tensor: a number, a size, a ``math``/``numpy`` result."""
    if depth <= 0:
        return False
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, (int, float, complex, bool)) or expr.value is None
    if isinstance(expr, (ast.Tuple, ast.List)):
        return all(_no_tensor(e, ctx, depth) for e in expr.elts)
    if isinstance(expr, ast.BinOp):
        return _no_tensor(expr.left, ctx, depth) and _no_tensor(expr.right, ctx, depth)
    if isinstance(expr, ast.UnaryOp):
        return _no_tensor(expr.operand, ctx, depth)
    if isinstance(expr, ast.Attribute) and expr.attr in ("shape", "ndim"):
        return True
    if isinstance(expr, ast.Subscript):
        return isinstance(expr.value, ast.Attribute) and expr.value.attr == "shape"
    if isinstance(expr, ast.Call):
        name = ctx.call_name(expr) or (expr.func.id if isinstance(expr.func, ast.Name) else "")
        if name in _SCALAR_CALLS or name.startswith(("math.", "numpy.")):
            return True
        return isinstance(expr.func, ast.Attribute) and expr.func.attr in _SCALAR_METHODS
    if isinstance(expr, ast.Name):
        memo_key = ("no_tensor", id(expr))
        known = ctx.memo.get(memo_key)
        if known is not None:
            return known  # type: ignore[no-any-return]
        ctx.memo[memo_key] = False  # in progress
        binds = ctx.bindings(expr)
        found = bool(binds) and all(_number_definition(owner, value, ctx, depth - 1) for owner, value in binds)
        ctx.memo[memo_key] = found
        return found
    return False


def _number_definition(owner: ast.AST, value: ast.AST | None, ctx: FileContext, depth: int) -> bool:
    annotation = getattr(owner, "annotation", None)
    if isinstance(annotation, ast.Name) and annotation.id in ("int", "float", "bool"):
        return True
    return isinstance(value, ast.expr) and _no_tensor(value, ctx, depth)
