from __future__ import annotations

import ast
import itertools
from typing import Iterator

from torchpact.findings import Category, Evidence, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.analysis.following import follows_definitions

# Modules with no parameters, no buffers and no train/eval behaviour: nothing is lost by not
# registering them.
STATELESS = {
    "ReLU", "ReLU6", "LeakyReLU", "ELU", "SELU", "CELU", "GELU", "SiLU", "Mish", "Sigmoid", "Tanh",
    "Hardtanh", "Hardswish", "Hardsigmoid", "Softplus", "Softsign", "Softmax", "LogSoftmax", "Softmin",
    "Identity", "Flatten", "Unflatten", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d",
    "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "Upsample", "PixelShuffle", "PixelUnshuffle", "ZeroPad2d",
    "ConstantPad1d", "ConstantPad2d", "ReflectionPad1d", "ReflectionPad2d", "ReplicationPad2d", "Tanhshrink",
    "Threshold", "GLU", "LogSigmoid", "Hardshrink", "Softshrink", "ChannelShuffle",
}
CONTAINERS = {"torch.nn.ModuleList", "torch.nn.ModuleDict", "torch.nn.Sequential", "torch.nn.ParameterList",
              "torch.nn.ParameterDict"}
# List methods a ModuleList does not have: the fix would break code using them.
LIST_ONLY = {"remove", "index", "count", "sort", "reverse", "copy", "clear"}


class SubmodulesInPlainContainer(Rule):
    """Submodules or parameters are kept in a plain `list` / `dict` attribute of an `nn.Module`.

    ## What it does
    Flags `self.layers = [nn.Linear(...) for _ in range(n)]`, `self.heads = {"a": Head(), ...}`,
    `self.scales = [nn.Parameter(...)]` and `self.blocks = []` filled with `self.blocks.append(Block())`,
    in a method of an `nn.Module` subclass, when the elements are module (or parameter)
    constructions and the container is never wrapped (`nn.ModuleList(self.layers)`,
    `nn.Sequential(*self.layers)`) nor registered by `add_module` / `register_module` / `setattr`.
    Lists of parameter-free, mode-free modules (activations, pooling, and local module classes that
    create no parameter, buffer or stateful submodule) are not flagged. An empty list filled with a
    module with parameters on one branch and a parameter-free one on another is a `warning`: only
    the paths through the first branch lose anything.

    ## Why is this bad?
    `nn.Module.__setattr__` registers `Module` and `Parameter` values, not lists or dicts of them.
    On torch 2.13 the weights of `self.layers = [nn.Linear(4, 4)]` are not in `.parameters()` (so the
    optimizer never updates them), not in `.state_dict()` (so checkpoints silently lose them), not
    moved by `.to(device)` / `.cuda()` (so the forward fails with a device mismatch, or stays on CPU),
    and `.eval()` does not reach them (a `Dropout` inside keeps dropping at inference).

    ## Fix safety
    The fix wraps a written-out list in `nn.ModuleList(...)` (`nn.ParameterList` for parameters) and
    a dict with string keys in `nn.ModuleDict(...)`; an empty list that is appended to becomes
    `nn.ModuleList()`. Indexing, iteration, `len`, `append`, `extend` and `insert` behave the same. It
    is offered only when the file imports `torch.nn` (or `torch`), not when the code uses list methods
    a `ModuleList` lacks (`remove`, `index`, `sort`, ...), and not when something that is not a
    module (a function, say) is added to the list later. After it, the state dict has the new
    parameters: old checkpoints (which never had them) need `strict=False` to load.
    """

    code = "TP403"
    category = Category.TRAINING
    severity = Severity.ERROR
    requires = (
        "the class is an `nn.Module` of this file and the attribute is assigned in one of its methods",
        "every element is built by a resolved `torch.nn` class with state or a stateful local module class "
        "(on every path, for `error`), and nothing registers the attribute elsewhere",
    )
    message = ("submodules kept in a plain list/dict are not registered: their parameters are not trained, "
               "not saved in the state_dict and not moved by .to()")
    fix_hint = "use nn.ModuleList / nn.ModuleDict (nn.ParameterList / nn.ParameterDict for parameters)"
    nodes = (ast.Assign,)
    triggers = ("self.",)
    fixable = True
    unsafe_fix = True  # see Fix safety: applied only with --unsafe-fixes
    facts = ("modules-in-plain-list-not-registered",)

    valid = [
        """
import torch.nn as nn
class MLP(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(n)])
        self.acts = [nn.ReLU(), nn.GELU()]
""",
        """
import torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        blocks = [nn.Conv2d(3, 3, 3) for _ in range(3)]
        self.blocks = blocks
        self.body = nn.Sequential(*self.blocks)
""",
        """
import torch.nn as nn
class Wrapper(nn.Module):
    def __init__(self, encoder, decoder):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.parts = [self.encoder, self.decoder]  # references to registered modules
""",
        """
import torch.nn as nn
class Net(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.layers = [nn.Linear(4, 4) for _ in range(n)]
        for i, layer in enumerate(self.layers):
            self.add_module(f"layer{i}", layer)
""",
        """
import torch.nn as nn
class Config:
    def __init__(self):
        self.layers = [nn.Linear(4, 4)]
""",
        """
import math
import torch
import torch.nn as nn
class SinusoidalEmbedding(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim
    def forward(self, t):
        freqs = torch.exp(-math.log(10000) * torch.arange(self.dim // 2, device=t.device) / self.dim)
        return torch.cat([(t[:, None] * freqs).sin(), (t[:, None] * freqs).cos()], -1)
class Model(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.embedders = [SinusoidalEmbedding(d) for d in dims]
        self.proj = nn.Linear(sum(dims), 8)
    def forward(self, t):
        return self.proj(torch.cat([e(t) for e in self.embedders], -1))
""",
    ]
    invalid = [
        Invalid(
            """
import torch
import torch.nn as nn
class MLP(nn.Module):
    def __init__(self, depth):
        super().__init__()
        self.layers = [nn.Linear(64, 64) for _ in range(depth)]
        self.scale = [nn.Parameter(torch.ones(64)) for _ in range(depth)]
    def forward(self, x):
        for layer, s in zip(self.layers, self.scale):
            x = layer(x) * s
        return x
""",
            fixed="""
import torch
import torch.nn as nn
class MLP(nn.Module):
    def __init__(self, depth):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(64, 64) for _ in range(depth)])
        self.scale = nn.ParameterList([nn.Parameter(torch.ones(64)) for _ in range(depth)])
    def forward(self, x):
        for layer, s in zip(self.layers, self.scale):
            x = layer(x) * s
        return x
""",
            count=2,
        ),
        Invalid(
            """
from torch import nn
class Block(nn.Module):
    pass
class MultiHead(nn.Module):
    def __init__(self, tasks):
        super().__init__()
        self.heads = {"cls": nn.Linear(16, 2), "reg": Block()}
        self.blocks = []
        for _ in range(4):
            self.blocks.append(Block())
""",
            fixed="""
from torch import nn
class Block(nn.Module):
    pass
class MultiHead(nn.Module):
    def __init__(self, tasks):
        super().__init__()
        self.heads = nn.ModuleDict({"cls": nn.Linear(16, 2), "reg": Block()})
        self.blocks = nn.ModuleList()
        for _ in range(4):
            self.blocks.append(Block())
""",
            count=2,
        ),
        """
import torch
class Model(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.drops = [torch.nn.Dropout(0.1) for _ in range(n)]
        self.drops.sort(key=id)
""",
        """
import torch.nn as nn
import torch.nn.functional as F
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.ops = [nn.Linear(4, 4), nn.Linear(4, 4)]
        self.ops.insert(1, F.relu)  # a ModuleList would refuse this: no autofix
""",
        Invalid(
            """
import torch
class Gates(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gates = [torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)]
""",
            fixed="""
import torch
class Gates(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gates = torch.nn.ModuleList([torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)])
""",
        ),
        Invalid(
            """
import torch.nn as nn
class Projections(nn.Module):
    def __init__(self, dims, hidden):
        super().__init__()
        self.proj = []
        for d in dims:
            if d != hidden:
                self.proj.append(nn.Conv2d(d, hidden, kernel_size=1))
            else:
                self.proj.append(nn.Sequential())
""",
            fixed="""
import torch.nn as nn
class Projections(nn.Module):
    def __init__(self, dims, hidden):
        super().__init__()
        self.proj = nn.ModuleList()
        for d in dims:
            if d != hidden:
                self.proj.append(nn.Conv2d(d, hidden, kernel_size=1))
            else:
                self.proj.append(nn.Sequential())
""",
            severity=Severity.WARNING,
        ),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Assign)
        if len(node.targets) != 1:
            return
        target = node.targets[0]
        if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"):
            return
        cls = ctx.enclosing_class(node)
        fn = ctx.enclosing_function(node)
        if cls is None or fn is None or cls.name not in ctx.module_classes or ctx.enclosing_class(fn) is not cls:
            return
        value = node.value
        elements, is_dict = _elements(value)
        if elements is None:
            return
        if elements and any(isinstance(e, ast.Name) for e in elements):
            return  # ``self._enc = [encoder]``: the usual way to keep a module *out* of registration
        added, complete = _additions(cls, target.attr)
        if not elements and isinstance(value, ast.List):
            elements = added
        kinds = [_construction(ctx, e) for e in elements]
        if not kinds or any(k is None for k in kinds) or all(k == "stateless" for k in kinds):
            return
        if _registered_elsewhere(ctx, cls, target.attr, node):
            return
        params = all(k == "parameter" for k in kinds)
        # a ModuleList refuses anything but modules: every element, also those added later, must be one
        later = [_construction(ctx, e) for e in added]
        same_kind = all(k == "parameter" for k in kinds + later) if params else all(
            k in ("module", "stateless") for k in kinds + later)
        edits = self._fix(ctx, cls, target.attr, value, is_dict, params) if complete and same_kind else []
        container = ("ParameterDict" if is_dict else "ParameterList") if params else (
            "ModuleDict" if is_dict else "ModuleList")
        # ``[]`` filled with a stateful module on one branch and a stateless one on another: only
        # the first path loses anything
        some_paths = not _elements(value)[0] and "stateless" in later
        yield self.hit(target, subject=f"self.{target.attr}", edits=edits,
                       fix_hint=f"use nn.{container}(...): it registers its elements",
                       evidence=Evidence.MAY if some_paths else Evidence.MUST,
                       message=("submodules kept in a plain list are not registered on the paths that add a module "
                                "with parameters: those are not trained, not saved in the state_dict and not moved "
                                "by .to()")
                       if some_paths else None)

    @staticmethod
    def _fix(ctx: FileContext, cls: ast.ClassDef, attr: str, value: ast.expr, is_dict: bool, params: bool):
        nn = _nn_alias(ctx)
        if nn is None or _uses_list_only_methods(cls, attr):
            return []
        if is_dict and not (isinstance(value, ast.Dict) and all(
                isinstance(k, ast.Constant) and isinstance(k.value, str) for k in value.keys)):
            return []  # ModuleDict keys must be strings
        container = ("ParameterDict" if is_dict else "ParameterList") if params else (
            "ModuleDict" if is_dict else "ModuleList")
        inner = ctx.locator.source(value)
        text = f"{nn}.{container}()" if isinstance(value, ast.List) and not value.elts else f"{nn}.{container}({inner})"
        return [ctx.locator.replace(value, text)]


def _elements(value: ast.expr) -> tuple[list[ast.expr] | None, bool]:
    if isinstance(value, ast.List):
        if any(isinstance(e, ast.Starred) for e in value.elts):
            return None, False
        return list(value.elts), False
    if isinstance(value, ast.ListComp):
        return [value.elt], False
    if isinstance(value, ast.Dict):
        if any(k is None for k in value.keys):
            return None, True
        return list(value.values), True
    if isinstance(value, ast.DictComp):
        return [value.value], True
    return None, False


@follows_definitions(None)
def _construction(ctx: FileContext, expr: ast.expr, depth: int = 0) -> str | None:
    """'module' / 'stateless' / 'parameter' when ``expr`` constructs one, else None."""
    if isinstance(expr, ast.Name):
        if depth > 2:
            return None
        kinds = {_construction(ctx, v, depth + 1) for v in ctx.values(expr) if v is not expr}
        return kinds.pop() if len(kinds) == 1 else None
    if not isinstance(expr, ast.Call):
        return None
    qn = ctx.call_name(expr)
    if qn is not None:
        parts = qn.split(".")
        if len(parts) >= 3 and parts[0] == "torch" and parts[1] == "nn" and parts[2] not in (
                "functional", "init", "utils") and parts[-1][:1].isupper():
            if parts[-1] == "Parameter":
                return "parameter"
            if parts[-1] in ("Sequential", "ModuleList", "ModuleDict") and not expr.args and not expr.keywords:
                return "stateless"  # an empty container: the identity, nothing to register
            return "stateless" if parts[-1] in STATELESS else "module"
        return None
    if isinstance(expr.func, ast.Name) and expr.func.id in ctx.module_classes:
        return "stateless" if _stateless_class(ctx, ctx.module_classes[expr.func.id]) else "module"
    return None


def _stateless_class(ctx: FileContext, cls: ast.ClassDef, depth: int = 0) -> bool:
    """A local module class that holds no state: its own code creates no parameter, buffer or
    stateful submodule (it may make tensors in ``forward`` on the input's device), and its bases
    are ``nn.Module`` or such classes. Not registering it loses nothing."""
    if depth > 3 or ctx.method(cls, "forward") is None:
        return False  # a stub (``class Block(nn.Module): pass``) says nothing about what it will hold
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in ctx.module_classes:
            if base.id == cls.name or not _stateless_class(ctx, ctx.module_classes[base.id], depth + 1):
                return False
        elif ctx.resolve(base) not in ("torch.nn.Module", "torch.nn.modules.module.Module"):
            return False
    for node in ast.walk(cls):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in (
                    "register_buffer", "register_parameter", "add_module", "register_module", "train", "eval"):
                return False
            kind = _construction(ctx, node, depth=3) if not (
                isinstance(func, ast.Name) and func.id == cls.name) else "module"
            if kind in ("module", "parameter"):
                return False
        elif isinstance(node, ast.Attribute) and node.attr == "training":
            return False  # behaves differently in train and eval mode
    return True


def _class_nodes(cls: ast.ClassDef) -> Iterator[ast.AST]:
    # walked once per class: each ``self.x = [...]`` of the class asks again. The class itself is not
    # kept in the list it holds (a reference cycle would keep the tree alive until the cyclic GC).
    inside = cls.__dict__.get("_tp_class_nodes")
    if inside is None:
        inside = cls._tp_class_nodes = tuple(ast.walk(cls))[1:]  # type: ignore[attr-defined]
    return itertools.chain((cls,), inside)


def _additions(cls: ast.ClassDef, attr: str) -> tuple[list[ast.expr], bool]:
    """Elements the class adds to ``self.<attr>`` later (``append``, ``insert``, ``extend([...])``,
    ``+= [...]``, ``self.<attr>[k] = v``), and whether that list is complete (every addition readable)."""
    out: list[ast.expr] = []
    complete = True
    for node in _class_nodes(cls):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _is_self_attr(node.func.value, attr):
            method, args = node.func.attr, node.args
            if method == "append" and len(args) == 1:
                out.append(args[0])
            elif method == "insert" and len(args) == 2:
                out.append(args[1])
            elif method in ("extend", "update", "setdefault"):
                if method == "extend" and len(args) == 1 and isinstance(args[0], (ast.List, ast.Tuple)):
                    out.extend(args[0].elts)
                else:
                    complete = False
        elif isinstance(node, ast.AugAssign) and _is_self_attr(node.target, attr):
            if isinstance(node.value, (ast.List, ast.Tuple)):
                out.extend(node.value.elts)
            else:
                complete = False
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Subscript) and _is_self_attr(t.value, attr) for t in node.targets):
            out.append(node.value)
    return out, complete


def _is_self_attr(node: ast.AST, attr: str) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.value, ast.Name)
            and node.value.id == "self")


def _registered_elsewhere(ctx: FileContext, cls: ast.ClassDef, attr: str, assign: ast.Assign) -> bool:
    for node in _class_nodes(cls):
        if isinstance(node, ast.Assign) and node is not assign and any(_is_self_attr(t, attr) for t in node.targets):
            return True  # rebound (e.g. wrapped in nn.ModuleList later): not sure what it holds
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("add_module", "register_module", "register_parameter", "setattr"):
                return True
            if ctx.call_name(node) in CONTAINERS:
                for arg in node.args:
                    arg = arg.value if isinstance(arg, ast.Starred) else arg
                    if any(_is_self_attr(n, attr) for n in ast.walk(arg)):
                        return True
    return False


def _uses_list_only_methods(cls: ast.ClassDef, attr: str) -> bool:
    for node in _class_nodes(cls):
        if isinstance(node, ast.Attribute) and node.attr in LIST_ONLY and _is_self_attr(node.value, attr):
            return True
        if isinstance(node, ast.BinOp) and (_is_self_attr(node.left, attr) or _is_self_attr(node.right, attr)):
            return True
    return False


def _nn_alias(ctx: FileContext) -> str | None:
    for name, origin in ctx.aliases.items():
        if origin == "torch.nn":
            return name
    for name, origin in ctx.aliases.items():
        if origin == "torch":
            return f"{name}.nn"
    return None
