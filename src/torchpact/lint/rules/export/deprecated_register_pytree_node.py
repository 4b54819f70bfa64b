from __future__ import annotations

import ast

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Invalid
from torchpact.lint.rules._api import ApiUse, call_text, respell

NEW = "torch.utils._pytree.register_pytree_node"
LEGACY_ONLY = {"to_str_fn", "maybe_from_str_fn"}


class DeprecatedRegisterPytreeNode(ApiUse):
    """`torch.utils._pytree._register_pytree_node` is used instead of `register_pytree_node`.

    ## What it does
    Flags uses of `torch.utils._pytree._register_pytree_node` (TorchFix TOR101, with its autofix).

    ## Why is this bad?
    On torch 2.13 it warns `FutureWarning: torch.utils._pytree._register_pytree_node is deprecated.
    Please use torch.utils._pytree.register_pytree_node instead.` Classes registered only through
    the old entry point also lack the serialized type name that `torch.export` needs to save a
    program that takes them.

    ## Fix safety
    For calls with the class, the flatten and the unflatten function only, the fix renames the
    call: the new function registers the same node. Calls passing the legacy `to_str_fn` /
    `maybe_from_str_fn` are reported without a fix.
    """

    code = "TP711"
    category = Category.EXPORT
    severity = Severity.WARNING
    message = "`torch.utils._pytree._register_pytree_node` is deprecated and warns on torch 2.13"
    fix_hint = "use `torch.utils._pytree.register_pytree_node` (and give `serialized_type_name=` for torch.export)"
    triggers = ("_register_pytree_node",)
    fixable = True
    names = {"torch.utils._pytree._register_pytree_node": None}

    valid = ["""
import torch.utils._pytree as pytree
pytree.register_pytree_node(Point, flatten, unflatten, serialized_type_name="mod.Point")
"""]
    invalid = [
        Invalid("""
import torch.utils._pytree as pytree
pytree._register_pytree_node(Point, flatten, unflatten)
""", fixed="""
import torch.utils._pytree as pytree
pytree.register_pytree_node(Point, flatten, unflatten)
"""),
    ]

    def fix_call(self, call: ast.Call, ctx: FileContext, qn: str) -> str | None:
        func = respell(call.func, ctx, NEW)
        if func is None or len(call.args) > 3 or any(k.arg in LEGACY_ONLY or k.arg is None for k in call.keywords):
            return None
        return call_text(ctx, call, func)
