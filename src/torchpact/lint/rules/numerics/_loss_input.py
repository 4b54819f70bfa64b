"""The input a loss is called on, for the rules about loss input contracts (probabilities vs logits
vs log-probabilities)."""

from __future__ import annotations

import ast

from torchpact.lint.context import FileContext
from torchpact.lint.rules.numerics._util import Activation, first_arg, is_instance_of, produced_by


def activated_loss_input(ctx: FileContext, call: ast.Call, functions: set[str], modules: set[str],
                         act: Activation) -> ast.expr | None:
    """The first argument of ``call`` when ``call`` is one of these losses and that argument is the
    output of ``act`` (directly, through a variable, a reshape or a model ending in it); else None."""
    if not (ctx.call_name(call) in functions or is_instance_of(ctx, call.func, modules)):
        return None
    arg = first_arg(call)
    if arg is None or produced_by(ctx, arg, act) is None:
        return None
    return arg
