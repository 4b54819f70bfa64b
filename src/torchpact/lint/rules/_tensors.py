"""Whether a value is resolved as a torch tensor, for rules about tensor methods.

Many objects have methods named like a tensor's: an ``nn.Module`` (``.to``, ``.cuda``, ``.half``
convert it in place), a whole module unpickled by ``torch.load``, a third-party runtime's model, a
numpy array (``.reshape``, ``.clip``), a project's own class (``self.stft``, ``self.norm``). A rule
about what ``Tensor.<method>`` does may only judge a call whose receiver is known to be a tensor:
every definition that reaches it is one. Known tensors are the results of torch's tensor functions
(``torch.zeros``, ``torch.cat``, ``F.relu``, ``torch.linalg.*``), of tensor methods on known tensors,
tensor operators and indexing of them, parameters annotated ``Tensor``, and the elements unpacked
from iterating a ``DataLoader`` (``default_collate`` stacks them into tensors). A module's output,
``torch.load``'s result, a whole batch and anything unassigned are not: they may be anything.
"""

from __future__ import annotations

import ast

from torchpact.lint.context import LOADER, TENSOR, FileContext
from torchpact.lint.dataflow import _Iterated, _Unpacked
from torchpact.lint.kinds import annotation_kinds
from torchpact.lint.analysis.following import follows_definitions

# Namespaces whose lower-case functions return tensors.
_TENSOR_NAMESPACES = ("torch.", "torch.nn.functional.", "torch.linalg.", "torch.fft.", "torch.special.")
# Lower-case functions of those namespaces that return something else (a module, a tuple, a flag...).
_NOT_TENSORS = frozenset({
    "torch.load", "torch.compile", "torch.device", "torch.get_default_dtype", "torch.is_tensor",
    "torch.is_floating_point", "torch.is_complex", "torch.numel", "torch.manual_seed", "torch.seed",
    "torch.initial_seed", "torch.typename", "torch.finfo", "torch.iinfo", "torch.no_grad",
    "torch.enable_grad", "torch.inference_mode", "torch.set_grad_enabled", "torch.autocast",
    "torch.vmap", "torch.cond", "torch.save", "torch.split", "torch.chunk", "torch.unbind",
    "torch.tensor_split", "torch.hsplit", "torch.vsplit", "torch.dsplit", "torch.broadcast_tensors",
    "torch.meshgrid", "torch.sort", "torch.topk", "torch.kthvalue", "torch.std_mean", "torch.var_mean",
    "torch.aminmax", "torch.frexp", "torch.histogram", "torch.cummax", "torch.cummin",
    "torch.linalg.eig", "torch.linalg.eigh", "torch.linalg.qr", "torch.linalg.svd", "torch.linalg.slogdet",
    "torch.linalg.lstsq", "torch.linalg.lu", "torch.linalg.lu_factor", "torch.linalg.lu_factor_ex",
    "torch.linalg.inv_ex", "torch.linalg.cholesky_ex", "torch.linalg.ldl_factor", "torch.linalg.ldl_factor_ex",
})
# Tensor methods that return a tensor (in-place ones, ending in ``_``, return their receiver).
TENSOR_METHODS = frozenset({
    "to", "cuda", "cpu", "float", "double", "half", "bfloat16", "long", "int", "bool", "byte", "type_as",
    "clamp", "clip", "add", "sub", "mul", "div", "pow", "abs", "neg", "exp", "log", "sqrt", "sigmoid",
    "tanh", "relu", "softmax", "log_softmax", "matmul", "mm", "bmm", "mean", "sum", "prod", "norm",
    "detach", "contiguous", "view", "view_as", "reshape", "reshape_as", "squeeze", "unsqueeze", "permute",
    "transpose", "t", "flatten", "unflatten", "clone", "expand", "expand_as", "repeat", "narrow", "flip",
    "roll", "tril", "triu", "cumsum", "masked_fill", "index_fill", "index_select", "gather", "scatter",
    "where", "eq", "ne", "gt", "ge", "lt", "le", "logical_not", "logical_and", "logical_or",
    "new_zeros", "new_ones", "new_full", "new_empty", "new_tensor", "float_power", "round", "floor",
    "ceil", "sign", "square", "reciprocal", "rsqrt", "argmax", "argmin", "any", "all",
})
_DEPTH = 12


def resolved_tensor(expr: ast.AST | None, ctx: FileContext) -> bool:
    """Whether ``expr`` is known to hold a torch tensor on every path that reaches it (see above)."""
    return _resolved(expr, ctx, _DEPTH)


def _resolved(expr: ast.AST | None, ctx: FileContext, depth: int) -> bool:
    if expr is None or depth <= 0:
        return False
    if isinstance(expr, (_Iterated, _Unpacked)):
        return _judge(expr, ctx, depth - 1)  # made per question: its id is no key
    key = ("resolved_tensor", id(expr))
    known = ctx.memo.get(key)
    if known is not None:
        return known  # type: ignore[return-value]
    ctx.memo[key] = False  # while in progress: a loop-carried ``x = x.float()`` proves nothing
    found = ctx.memo[key] = _judge(expr, ctx, depth - 1)
    return found


@follows_definitions(False)
def _judge(expr: ast.AST, ctx: FileContext, depth: int) -> bool:
    if isinstance(expr, (ast.Name, ast.Attribute)):
        binds = ctx.bindings(expr)
        return bool(binds) and all(_definition(owner, value, ctx, depth) for owner, value in binds)
    if isinstance(expr, _Unpacked):
        # ``for images, labels in loader``: the elements default_collate stacked into tensors
        inner = expr.value
        return isinstance(inner, _Iterated) and LOADER in ctx.kinds(inner.iterable)
    if isinstance(expr, ast.Call):
        qn = ctx.call_name(expr)
        if qn is not None:
            return _tensor_function(qn)
        func = expr.func
        return (isinstance(func, ast.Attribute) and (func.attr in TENSOR_METHODS or func.attr.endswith("_"))
                and _resolved(func.value, ctx, depth))
    if isinstance(expr, ast.Subscript):
        return _resolved(expr.value, ctx, depth)
    if isinstance(expr, ast.BinOp):  # an operator with a tensor operand gives a tensor (or raises)
        return _resolved(expr.left, ctx, depth) or _resolved(expr.right, ctx, depth)
    if isinstance(expr, ast.UnaryOp):
        return _resolved(expr.operand, ctx, depth)
    if isinstance(expr, ast.IfExp):
        return _resolved(expr.body, ctx, depth) and _resolved(expr.orelse, ctx, depth)
    return False


def _definition(owner: ast.AST, value: ast.AST | None, ctx: FileContext, depth: int) -> bool:
    annotation = getattr(owner, "annotation", None)
    if annotation is not None and TENSOR in annotation_kinds(ctx, annotation):
        return True  # ``x: Tensor`` / ``mask: Optional[torch.Tensor]``
    return value is not None and _resolved(value, ctx, depth)


def _tensor_function(qn: str) -> bool:
    if qn in _NOT_TENSORS:
        return False
    namespace, _, last = qn.rpartition(".")
    if namespace + "." not in _TENSOR_NAMESPACES or not last[:1].islower():
        return qn in ("torch.Tensor", "torch.FloatTensor", "torch.LongTensor", "torch.BoolTensor")
    return True
