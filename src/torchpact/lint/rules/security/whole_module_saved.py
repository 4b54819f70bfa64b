from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import DDP, MODULE, FileContext, argument
from torchpact.lint.rule import Hit, Rule


class WholeModuleSaved(Rule):
    """`torch.save(model, path)` pickles the whole module instead of its `state_dict()`.

    ## What it does
    Flags `torch.save(x, ...)` where `x` is an `nn.Module` by local dataflow (a model built from a
    local `nn.Module` class or `torch.nn`, not through a name alone).

    ## Why is this bad?
    The file then holds a pickle of the model's class by import path. On torch 2.13 the default
    `torch.load(path)` (`weights_only=True`) refuses it with `UnpicklingError: Weights only load
    failed`, so every consumer has to pass `weights_only=False` — a full unpickle that runs any
    code the file contains — and the load still breaks as soon as the class is renamed or moved.

    ## Fix safety
    No autofix: save `model.state_dict()` and load it into a freshly built model with
    `model.load_state_dict(torch.load(path))`, which also changes the loading code.
    """

    code = "TP960"
    category = Category.SECURITY
    severity = Severity.WARNING
    requires = (
        "the saved object is resolved to an `nn.Module` through dataflow (not by a name alone)",
    )
    message = ("the whole module is pickled: loading it needs `weights_only=False` (a full, code-running "
               "unpickle) and the class at the same import path")
    fix_hint = "save `model.state_dict()` and load it with `model.load_state_dict(torch.load(path))`"
    nodes = (ast.Call,)
    calls = frozenset({"save"})
    triggers = ("save",)

    valid = ["""
import torch
from torch import nn
model = nn.Linear(4, 2)
torch.save(model.state_dict(), "model.pt")
torch.save({"model": model.state_dict(), "epoch": 3}, "ckpt.pt")
"""]
    invalid = ["""
import torch
from torch import nn
class Net(nn.Module):
    pass
model = Net()
torch.save(model, "model.pt")
"""]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if ctx.call_name(node) != "torch.save":
            return
        obj = argument(node, "obj", 0)
        if obj is None:
            return
        kinds = ctx.kinds(obj, hints=False)
        if MODULE in kinds and DDP not in kinds:
            yield self.hit(node, subject=ctx.locator.source(obj))
