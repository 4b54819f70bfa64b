from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, is_const, keyword
from torchpact.lint.rule import Hit, Rule

TORCH_LOAD = {"torch.load", "torch.serialization.load"}
LOAD_FROM_URL = {"torch.hub.load_state_dict_from_url", "torch.utils.model_zoo.load_url"}


class LoadWithFullPickle(Rule):
    """A checkpoint is fully unpickled (`weights_only=False`): loading it runs code from the file.

    ## What it does
    Flags `torch.load(..., weights_only=False)` (unless the same function has just written that file
    with `torch.save`); `torch.load(..., pickle_module=...)` without
    `weights_only`, whose default is then `False` (with `weights_only=True` as well, torch raises
    "Can not safely load weights when explicit pickle_module is specified"); and `torch.hub.load_state_dict_from_url(...)`
    (also `torch.utils.model_zoo.load_url`) unless it passes `weights_only=True`: on torch 2.13
    its `weights_only` still defaults to `False`, so a downloaded file is fully unpickled.

    ## Why is this bad?
    Full unpickling calls whatever callables the file names, with arguments from the file. In the
    proof, a checkpoint saved with an object whose `__reduce__` returns `(open, (marker, "w"))`
    creates the marker file the moment `torch.load(path, weights_only=False)` reads it — the same
    hook runs `os.system` just as well. The default `torch.load(path)` (`weights_only=True` since
    torch 2.6) refuses the file with `_pickle.UnpicklingError: Weights only load failed. ...
    WeightsUnpickler error: Unsupported global: GLOBAL io.open was not an allowed global by default.`
    A checkpoint, a downloaded model or a file in a shared cache is untrusted input unless you made it.

    ## Fix safety
    No autofix: `weights_only=True` rejects checkpoints that pickle arbitrary objects. Tensors,
    state dicts, optimizer states and plain Python containers/numbers/strings load fine with it; for
    your own classes, allow them with `torch.serialization.add_safe_globals([...])` (or the
    `safe_globals` context manager). Keep `weights_only=False` only for files you produced yourself,
    and say so with `# noqa: TP951`.
    """

    code = "TP951"
    category = Category.SECURITY
    severity = Severity.WARNING
    facts = ("load-defaults-to-weights-only",)
    message = ("the checkpoint is fully unpickled (`weights_only=False`): a malicious file runs arbitrary "
               "code the moment it is loaded")
    fix_hint = ("load with `weights_only=True` (allow your own classes with "
                "`torch.serialization.add_safe_globals`); keep full unpickling only for files you created")
    nodes = (ast.Call,)
    triggers = ("load",)

    valid = [
        """
import torch
state = torch.load("model.pt", map_location="cpu")
model.load_state_dict(torch.load("model.pt", weights_only=True))
""",
        """
import torch
def restore(path, weights_only=True):
    return torch.load(path, weights_only=weights_only)
""",
        """
import torch
import pickle
sd = torch.hub.load_state_dict_from_url(URL, weights_only=True)
meta = pickle.loads(blob)
net = torch.jit.load("scripted.pt")
""",
        """
import io
import torch
def deep_copy(model):
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)
""",
    ]
    invalid = [
        """
import torch
ckpt = torch.load("checkpoint.pt", map_location="cpu", weights_only=False)
""",
        """
from torch import load
import dill
def restore(path):
    return load(path, pickle_module=dill)
""",
        """
import torch.hub
state_dict = torch.hub.load_state_dict_from_url("https://example.com/resnet.pth", progress=False)
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        name = ctx.call_name(node)
        if name is None or (name not in TORCH_LOAD and name not in LOAD_FROM_URL):
            return
        assert isinstance(node, ast.Call)
        if any(k.arg is None for k in node.keywords):
            return  # **kwargs may carry weights_only
        weights_only = keyword(node, "weights_only")
        if weights_only is None and name in LOAD_FROM_URL and len(node.args) >= 7:
            weights_only = node.args[6]
        shown = ctx.locator.source(node.func)
        if weights_only is not None:
            if is_const(weights_only, False) and not _round_trip(node, ctx):
                yield self.hit(node, subject=shown)
            return
        if name in LOAD_FROM_URL:
            yield self.hit(node, subject=shown, message=(
                f"`{shown}` fully unpickles the downloaded file (its `weights_only` defaults to False even on "
                "torch 2.13): a malicious file runs arbitrary code the moment it is loaded"),
                fix_hint="pass `weights_only=True`")
        elif keyword(node, "pickle_module") is not None or len(node.args) >= 3:
            yield self.hit(node, subject=shown, message=(
                "passing `pickle_module` makes `torch.load` default to `weights_only=False`: the file is fully "
                "unpickled and a malicious one runs arbitrary code the moment it is loaded"),
                fix_hint=("drop `pickle_module` and pass `weights_only=True` (torch refuses the two together: "
                          "\"Can not safely load weights when explicit pickle_module is specified\")"))


def _round_trip(load: ast.Call, ctx: FileContext) -> bool:
    """``torch.save(obj, f)`` then ``torch.load(f, ...)`` in the same function: the file is one this
    code just wrote, not untrusted input."""
    source = load.args[0] if load.args else keyword(load, "f")
    if source is None:
        return False
    wanted = ast.dump(source)
    scope = ctx.scope(load)
    body = scope.body if isinstance(getattr(scope, "body", None), list) else [scope]
    for node in ctx.walk_scope(body):
        if isinstance(node, ast.Call) and ctx.call_name(node) in ("torch.save", "torch.serialization.save"):
            target = node.args[1] if len(node.args) >= 2 else keyword(node, "f")
            if target is not None and ast.dump(target) == wanted and node.lineno <= load.lineno:
                return True
    return False
