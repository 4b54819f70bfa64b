from __future__ import annotations

from torchpact.findings import Category, Severity
from torchpact.lint.rules._api import ApiUse


class DeprecatedWeightNorm(ApiUse):
    """`torch.nn.utils.weight_norm` is used instead of `torch.nn.utils.parametrizations.weight_norm`.

    ## What it does
    Flags uses and imports of `torch.nn.utils.weight_norm` (TorchFix TOR101). A call inside a
    `with warnings.catch_warnings():` block that ignores this warning (by its `FutureWarning`
    category, or a `message=` pattern matching its text) is deliberate — typically to keep the
    `weight_g` / `weight_v` parameter names of an existing checkpoint format — and is not flagged,
    nor is the import when every use is so silenced. A module-wide `warnings.simplefilter("ignore")`
    is not such a sign.

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
    warning_category = "FutureWarning"
    warning_text = ("`torch.nn.utils.weight_norm` is deprecated in favor of "
                    "`torch.nn.utils.parametrizations.weight_norm`.")

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
""", """
import warnings
from torch.nn.utils import weight_norm

class PositionalConv(Conv1d):
    def reset_parameters(self):
        super().reset_parameters()
        with warnings.catch_warnings():
            warnings.filterwarnings(
                action="ignore", message=r".*deprecated in favor of `torch.nn.utils.parametrizations.weight_norm`.*"
            )
            weight_norm(self, dim=2)
""", """
import warnings
import torch.nn as nn

def legacy_wn(conv):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return nn.utils.weight_norm(conv)
""", """
import warnings
from torch import nn

def keep_old_names(layer):
    with warnings.catch_warnings(action="ignore", category=FutureWarning):
        nn.utils.weight_norm(layer, name="weight")
    return layer
""", """
import warnings
from torch import nn

def wn(m):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`torch.nn.utils.weight_norm` is deprecated")
        m = nn.utils.weight_norm(m)
    return m
""", """
from warnings import catch_warnings, simplefilter
import torch

def wrap(layer):
    with catch_warnings():
        simplefilter("ignore")
        return torch.nn.utils.weight_norm(layer)
""", """
import warnings
from torch.nn.utils import weight_norm

NORMS = {"weight": weight_norm}

def legacy(m):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return weight_norm(m)
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
""", """
import warnings
from torch import nn
warnings.simplefilter("ignore", FutureWarning)
conv = nn.utils.weight_norm(nn.Conv1d(16, 16, 3))
""", """
import warnings
from torch import nn

def wn(m):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return nn.utils.weight_norm(m)
""", """
import warnings
from torch import nn

def wn(m):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="weight_norm is deprecated")
        return nn.utils.weight_norm(m)
""", """
import warnings
from torch.nn.utils import weight_norm

def build(conv, legacy):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        def apply(m):
            return weight_norm(m)
    return apply(conv)
""", """
import warnings
from torch import nn

def wn(m):
    with warnings.catch_warnings():
        out = nn.utils.weight_norm(m)
        warnings.simplefilter("ignore", FutureWarning)
    return out
"""]
