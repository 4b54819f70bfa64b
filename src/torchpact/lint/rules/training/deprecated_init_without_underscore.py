from __future__ import annotations

from torchpact.findings import Category, Severity
from torchpact.lint.rule import Invalid
from torchpact.lint.rules._api import ApiUse

INITS = ("constant", "dirac", "eye", "kaiming_normal", "kaiming_uniform", "normal", "orthogonal",
         "sparse", "uniform", "xavier_normal", "xavier_uniform")


class DeprecatedInitWithoutUnderscore(ApiUse):
    """An `nn.init` function is called by its deprecated name without the trailing underscore.

    ## What it does
    Flags `nn.init.normal`, `uniform`, `constant`, `xavier_*`, `kaiming_*`, `orthogonal`, `sparse`,
    `dirac` and `eye` — the names without `_`.

    ## Why is this bad?
    On torch 2.13 each warns `FutureWarning: nn.init.normal is now deprecated in favor of
    nn.init.normal_.` The underscore says what both do: they fill the tensor in place.

    ## Fix safety
    The old names call the underscored functions with the same arguments; the fix renames the call
    (the proof compares the filled tensors).
    """

    code = "TP414"
    category = Category.TRAINING
    severity = Severity.WARNING
    message = "this `nn.init` name without `_` is deprecated and warns on torch 2.13"
    fix_hint = "use the in-place name with a trailing underscore, e.g. `nn.init.normal_`"
    triggers = ("init",)
    fixable = True
    names = {f"torch.nn.init.{n}": f"torch.nn.init.{n}_" for n in INITS}

    valid = ["""
from torch import nn
nn.init.xavier_uniform_(layer.weight)
nn.init.zeros_(layer.bias)
""",
        """
from __future__ import annotations
from typing import Annotated
import torch
from torch import nn
def reset(weight: Annotated[torch.Tensor, nn.init.normal(torch.empty(1))]) -> None:
    nn.init.normal_(weight)
""",
        """
from typing import Annotated
import torch
from torch import nn
def reset(weight):
    filled: Annotated[torch.Tensor, nn.init.uniform(torch.empty(1))] = nn.init.uniform_(weight)
    return filled
""",
        """
import torch.nn as nn
_saved_normal = nn.init.normal

def silent_build(make):
    nn.init.normal = lambda tensor, *args, **kwargs: tensor
    try:
        return make()
    finally:
        nn.init.normal = _saved_normal
""",
        """
from torch import nn
def describe(init_fn):
    if init_fn is nn.init.kaiming_normal:
        return "he"
    return {nn.init.xavier_uniform: "glorot", nn.init.orthogonal: "orthogonal"}.get(init_fn)
""",
    ]
    invalid = [Invalid("""
from torch import nn
nn.init.xavier_uniform(layer.weight, gain=nn.init.calculate_gain("relu"))
nn.init.constant(layer.bias, 0.0)
""", fixed="""
from torch import nn
nn.init.xavier_uniform_(layer.weight, gain=nn.init.calculate_gain("relu"))
nn.init.constant_(layer.bias, 0.0)
""", count=2),
        Invalid("""
import torch.nn as nn
_saved_normal = nn.init.normal

def logged_normal(tensor, *args, **kwargs):
    log("init", tensor.shape)
    return _saved_normal(tensor, *args, **kwargs)
"""),
        Invalid("""
from torch.nn.init import uniform
INITS = {"uniform": uniform}
uniform(layer.weight, -0.1, 0.1)
"""),
        Invalid("""
import functools
from torch import nn
small_uniform = functools.partial(nn.init.uniform, a=-0.01, b=0.01)
""", fixed="""
import functools
from torch import nn
small_uniform = functools.partial(nn.init.uniform_, a=-0.01, b=0.01)
"""),
        Invalid("""
from typing import Annotated
import torch
from torch import nn
def reset(weight: Annotated[torch.Tensor, nn.init.normal(torch.empty(1))]) -> None:
    nn.init.normal_(weight)
""", fixed="""
from typing import Annotated
import torch
from torch import nn
def reset(weight: Annotated[torch.Tensor, nn.init.normal_(torch.empty(1))]) -> None:
    nn.init.normal_(weight)
"""),
        Invalid("""
from torch.nn.init import orthogonal
orthogonal(rnn.weight_hh_l0)
""", fixed="""
from torch.nn.init import orthogonal_ as orthogonal
orthogonal(rnn.weight_hh_l0)
"""),
    ]

    def describe(self, qn: str) -> str | None:
        return f"`{qn}` is deprecated in favour of `{qn}_` and warns on torch 2.13"
