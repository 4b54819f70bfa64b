from __future__ import annotations

import ast

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, argument, keyword
from torchpact.lint.rule import Invalid
from torchpact.lint.rules._api import ApiUse, respell


def _int_literal(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant)
            and type(node.operand.value) is int):
        return -node.operand.value
    return None


class TorchRange(ApiUse):
    """`torch.range` is used; it is deprecated, includes its end point and returns floats.

    ## What it does
    Flags `torch.range(...)` (TorchFix TOR101).

    ## Why is this bad?
    On torch 2.13 `torch.range` warns `torch.range is deprecated and will be removed in a future
    release because its behavior is inconsistent with Python's range builtin`. Unlike `range` and
    `torch.arange` it includes `end` (`torch.range(0, 3)` has 4 elements) and it returns the default
    float dtype even for integer arguments, so code ported between the two is off by one.

    ## Fix safety
    The fix is offered when `end` (and `step`, if given) are integer literals: `torch.range(0, 3)`
    becomes `torch.arange(0, 4, dtype=torch.get_default_dtype())` — the same values and the same
    dtype (an explicit `dtype=` is kept instead). With a float or computed step the end point
    cannot be moved exactly, so no fix is offered.
    """

    code = "TP313"
    category = Category.NUMERICS
    severity = Severity.WARNING
    message = "`torch.range` is deprecated, includes `end` and returns floats: it warns on torch 2.13"
    fix_hint = "use `torch.arange(start, end + step, step)` (half-open, like Python's range)"
    triggers = ("range",)
    fixable = True
    names = {"torch.range": None}

    valid = [
        """
import torch
idx = torch.arange(0, 10)
for i in range(10):
    pass
""",
    ]
    invalid = [
        Invalid("""
import torch
steps = torch.range(0, 9)
evens = torch.range(0, 8, 2, dtype=torch.long)
""", fixed="""
import torch
steps = torch.arange(0, 10, dtype=torch.get_default_dtype())
evens = torch.arange(0, 10, 2, dtype=torch.long)
""", count=2),
        """
import torch
ts = torch.range(0.0, 1.0, 0.1)
""",
    ]

    def fix_call(self, call: ast.Call, ctx: FileContext, qn: str) -> str | None:
        func = respell(call.func, ctx, "torch.arange")
        if func is None or any(isinstance(a, ast.Starred) for a in call.args) or len(call.args) > 3:
            return None
        if any(k.arg not in ("start", "end", "step", "dtype", "device", "requires_grad") for k in call.keywords):
            return None
        if len(call.args) == 1 and keyword(call, "end") is None:
            start, end = None, call.args[0]
        else:
            start, end = argument(call, "start", 0), argument(call, "end", 1)
        step_node = argument(call, "step", 2)
        step = 1 if step_node is None else _int_literal(step_node)
        stop = _int_literal(end)
        if step is None or stop is None or step == 0:
            return None
        parts = [] if start is None else [ctx.locator.source(start)]
        parts.append(str(stop + step))
        if step_node is not None:
            parts.append(ctx.locator.source(step_node))
        for k in call.keywords:
            if k.arg not in ("start", "end", "step"):
                parts.append(f"{k.arg}={ctx.locator.source(k.value)}")
        if keyword(call, "dtype") is None:
            root = respell(call.func, ctx, "torch")
            parts.append(f"dtype={root}.get_default_dtype()")
        return f"{func}({', '.join(parts)})"
