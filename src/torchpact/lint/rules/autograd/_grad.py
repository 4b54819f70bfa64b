"""Whether an expression certainly holds a tensor that requires grad (for TP204 / TP205)."""

from __future__ import annotations

import ast

from torchpact.findings import Evidence
from torchpact.lint.callsites import passed_values
from torchpact.lint.context import MODULE, FileContext, is_const
from torchpact.lint.rules.autograd._util import (
    TRAINING_CALLS, creates_grad_leaf, grad_off, is_torch_factory, name_key, note_parameters_of, parameter_loop_binding,
    scope_body, turns_off_grad,
)
from torchpact.lint.analysis.following import follows_definitions

# Methods whose result is attached to the receiver's graph (and requires grad when it does).
PASS_METHODS = {
    "to", "cuda", "cpu", "float", "double", "half", "bfloat16", "view", "view_as", "reshape", "reshape_as",
    "squeeze", "unsqueeze", "flatten", "contiguous", "clone", "transpose", "permute", "t", "expand",
    "expand_as", "mean", "sum", "prod", "abs", "exp", "log", "pow", "sqrt", "sigmoid", "tanh", "relu",
    "softmax", "log_softmax", "mul", "div", "add", "sub", "matmul", "type_as", "narrow", "select",
    "squeeze_", "unsqueeze_", "norm", "neg", "square",
}
# Conversions that return the tensor itself when nothing changes (``w.float()`` on a float32 leaf
# is ``w``): their result may still be the leaf (TP203 covers the cases where it certainly is not).
MAYBE_SELF = {"to", "cuda", "cpu", "float", "double", "half", "bfloat16", "type", "type_as", "contiguous",
              "requires_grad_", "detach_", "share_memory_"}
# Fields of model-output objects that carry the graph.
OUTPUT_FIELDS = {"logits", "loss", "last_hidden_state", "pooler_output", "prediction_logits"}
# torch.nn layers that own trainable parameters by default (their output requires grad).
PARAMETRIC_LAYERS = {
    "Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
    "ConvTranspose3d", "Embedding", "EmbeddingBag", "LSTM", "GRU", "RNN", "LSTMCell", "GRUCell",
    "RNNCell", "LayerNorm", "GroupNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "RMSNorm",
    "MultiheadAttention", "Transformer", "TransformerEncoder", "TransformerDecoder",
    "TransformerEncoderLayer", "TransformerDecoderLayer", "PReLU", "Sequential",
}


def strip_graph_ops(ctx: FileContext, expr: ast.AST) -> ast.AST:
    """The tensor a chain of graph-preserving ops starts from: ``out.logits[0].cpu()`` -> ``out``."""
    cur = expr
    while True:
        if (isinstance(cur, ast.Call) and isinstance(cur.func, ast.Attribute) and cur.func.attr in PASS_METHODS
                and ctx.resolve(cur.func) is None):  # a method, not ``torch.tanh(...)``
            cur = cur.func.value
        elif isinstance(cur, ast.Subscript):
            cur = cur.value
        elif isinstance(cur, ast.Attribute) and cur.attr in OUTPUT_FIELDS:
            cur = cur.value
        else:
            return cur


def requires_grad(ctx: FileContext, expr: ast.AST, depth: int = 0) -> bool:
    """True only when ``expr`` certainly requires grad where it was computed (as far as lint can see)."""
    if depth > 4:
        return False
    expr = strip_graph_ops(ctx, expr)
    if isinstance(expr, (ast.Name, ast.Attribute)) and name_key(expr) is not None:
        return _name_requires_grad(ctx, expr, depth)
    if grad_off(ctx, expr):
        return False
    return _computed_requires_grad(ctx, expr, depth)


@follows_definitions(False)
def _name_requires_grad(ctx: FileContext, expr: ast.AST, depth: int) -> bool:
    if depth > 4:  # here, not only in ``requires_grad``: a name's definitions lead back to this function
        return False
    key = name_key(expr)
    assert key is not None
    if turns_off_grad(ctx, expr, key):
        return False
    binds = ctx.bindings(expr)
    if not binds:
        return False
    scope = ctx.scope(expr)
    backwarded = (isinstance(expr, ast.Name) and expr.id in ctx.backward_names(scope)
                  and _own_backward(ctx, scope, expr.id))
    loops, by_backward = [], False
    for owner, value in binds:
        if isinstance(expr, ast.Name) and parameter_loop_binding(ctx, owner, expr.id):
            loops.append(owner)
            continue
        if value is None or grad_off(ctx, owner):
            return False
        if creates_grad_leaf(ctx, value):
            continue
        if backwarded and isinstance(value, (ast.Call, ast.BinOp)):
            by_backward = True
            continue  # backward() on it succeeds only if it requires grad
        if not _computed_requires_grad(ctx, value, depth + 1):
            return False
    for owner in loops:
        note_parameters_of(ctx, owner)
    if by_backward:
        ctx.note(Evidence.MAY, f"`{key}` is taken to require grad because `.backward()` is called on it")
    return True


def _own_backward(ctx: FileContext, scope: ast.AST, name: str) -> bool:
    """``name.backward()`` itself (not ``accelerator.backward(name)``) is called in ``scope``."""
    for node in ctx.walk_scope(scope_body(scope)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "backward"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == name):
            return True
    return False


def _computed_requires_grad(ctx: FileContext, value: ast.AST, depth: int) -> bool:
    value = strip_graph_ops(ctx, value)
    if isinstance(value, (ast.Name, ast.Attribute)) and name_key(value) is not None:
        return _name_requires_grad(ctx, value, depth + 1)
    if isinstance(value, ast.BinOp):
        return requires_grad(ctx, value.left, depth + 1) or requires_grad(ctx, value.right, depth + 1)
    if isinstance(value, ast.UnaryOp):
        return requires_grad(ctx, value.operand, depth + 1)
    if isinstance(value, ast.Call):
        if creates_grad_leaf(ctx, value):
            return True
        if is_torch_factory(ctx, value) or (ctx.call_name(value) or "").startswith("torch.nn.functional."):
            qn = ctx.call_name(value) or ""
            if qn.rsplit(".", 1)[-1] in ("argmax", "argmin", "argsort", "where", "nonzero", "no_grad"):
                return False
            return any(requires_grad(ctx, a, depth + 1) for a in value.args)
        return _trained_model_call(ctx, value)
    return False


def _trained_model_call(ctx: FileContext, call: ast.Call) -> bool:
    """``model(x)`` for a model with parameters, in training code (a backward / step in the same
    function) or in a module-level script, where gradients are on."""
    func = call.func
    if MODULE not in ctx.kinds(func):
        return False
    if not _has_trainable_parameters(ctx, func, 0):
        return False
    scope = ctx.scope(call)
    if scope is ctx.tree:
        return True
    for node in ctx.walk_scope(scope_body(scope)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in TRAINING_CALLS:
            return True
    return False


@follows_definitions(True)
def _has_trainable_parameters(ctx: FileContext, module: ast.AST, depth: int) -> bool:
    """Not a parameter-free torch layer, nor a model frozen with ``requires_grad_(False)`` — followed
    through the values a parameter receives at this file's calls of its function."""
    if depth > 3:
        return True
    key = name_key(module)
    if key is not None and _frozen(ctx, key):
        return False
    if ctx.makes_parameter_free(module):
        return False
    passed = passed_values(ctx, module)
    for v in passed if passed is not None else ctx.values(module):
        if v is module:
            continue
        while (isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute)
               and v.func.attr in ("to", "cuda", "cpu", "train", "float", "double", "half")):
            v = v.func.value
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "requires_grad_" \
                and v.args and not is_const(v.args[0], True):
            return False  # ``train(Net().requires_grad_(False))``
        qn = ctx.call_name(v) if isinstance(v, ast.Call) else None
        if qn and qn.startswith("torch.nn.") and qn.rsplit(".", 1)[-1] not in PARAMETRIC_LAYERS:
            return False
        if ctx.makes_parameter_free(v):
            return False
        if passed is not None and isinstance(v, (ast.Name, ast.Attribute)) and not _has_trainable_parameters(
                ctx, v, depth + 1):
            return False
    return True


def _frozen(ctx: FileContext, key: str) -> bool:
    """``model.requires_grad_(False)`` / ``p.requires_grad = False`` anywhere in the file for this model."""
    for node in ctx.nodes(ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "requires_grad_" and name_key(f.value) == key and node.args \
                and not is_const(node.args[0], True):
            return True
    for node in ctx.nodes(ast.Assign):
        for t in node.targets:
            if isinstance(t, ast.Attribute) and t.attr == "requires_grad":
                return True
    return False
