from __future__ import annotations

from torchpact.findings import Category, Severity
from torchpact.lint.rules._api import ApiUse


class DeprecatedWeightNorm(ApiUse):
    """`torch.nn.utils.weight_norm` is used instead of `torch.nn.utils.parametrizations.weight_norm`.

    ## What it does
    Flags uses and imports of `torch.nn.utils.weight_norm` (TorchFix TOR101).

    ## Why is this bad?
    On torch 2.13 it warns `FutureWarning: torch.nn.utils.weight_norm is deprecated in favor of
    torch.nn.utils.parametrizations.weight_norm.` The old hook-based version also breaks
    `deepcopy` and does not compose with `torch.func` / `torch.compile` the way parametrizations do.

    ## Fix safety
    No autofix: the parametrized module stores its parameters as
    `parametrizations.weight.original0` / `original1` instead of `weight_g` / `weight_v`, so
    existing checkpoints need their keys mapped (and `remove_weight_norm` becomes
    `torch.nn.utils.parametrize.remove_parametrizations`).
    """

    code = "TP413"
    category = Category.TRAINING
    severity = Severity.WARNING
    message = "`torch.nn.utils.weight_norm` is deprecated and warns on torch 2.13"
    fix_hint = ("use `torch.nn.utils.parametrizations.weight_norm` (state-dict keys become "
                "`parametrizations.weight.original0/1`)")
    triggers = ("weight_norm",)
    names = {"torch.nn.utils.weight_norm": None}

    valid = ["""
from torch import nn
from torch.nn.utils.parametrizations import weight_norm
conv = weight_norm(nn.Conv1d(16, 16, 3))
""", """
from torch import nn
def apply_weight_norm(layer):
    weight_norm = nn.utils.weight_norm
    if hasattr(nn.utils.parametrizations, "weight_norm"):
        weight_norm = nn.utils.parametrizations.weight_norm
    weight_norm(layer)
""", """
from __future__ import annotations
import typing
import torch
if typing.TYPE_CHECKING:
    from torch.nn.utils import weight_norm

def describe(wrapper: weight_norm) -> str:
    return wrapper.__name__
"""]
    invalid = ["""
from torch import nn
conv = nn.utils.weight_norm(nn.Conv1d(16, 16, 3))
""", """
import typing
import torch
if typing.TYPE_CHECKING:
    from torch.nn.utils import weight_norm
import torch.nn.utils as nn_utils
conv = nn_utils.weight_norm(torch.nn.Conv1d(4, 4, 3))
"""]
