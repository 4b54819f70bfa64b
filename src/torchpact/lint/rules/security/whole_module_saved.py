from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import DDP, MODULE, FileContext, argument, is_const, keyword
from torchpact.lint.rule import Hit, Invalid, Rule

# File objects that live in memory, or on disk without a name, and are gone once closed.
IN_MEMORY_FILES = frozenset({"io.BytesIO", "tempfile.TemporaryFile", "tempfile.SpooledTemporaryFile"})
# What may be done with such a buffer without its bytes leaving the function.
_BUFFER_METHODS = frozenset({"seek", "tell", "close", "flush", "truncate"})
TORCH_SAVE = frozenset({"torch.save", "torch.serialization.save"})
TORCH_LOAD = frozenset({"torch.load", "torch.serialization.load"})


class WholeModuleSaved(Rule):
    """`torch.save(model, path)` pickles the whole module instead of its `state_dict()`.

    ## What it does
    Flags `torch.save(x, f)` where `x` is an `nn.Module` by local dataflow (a model built from a
    local `nn.Module` class or `torch.nn`, not through a name alone) and `f` is a file that outlives
    the function: a path, an open file, a buffer it returns, stores or hands on.

    A save into an in-memory file object (`io.BytesIO()`, `tempfile.TemporaryFile()`,
    `tempfile.SpooledTemporaryFile()`) that the function (or script) creates and whose bytes never
    leave it (the buffer is only saved to, loaded from, `seek`ed, `tell`ed, `close`d) writes no
    artifact: read back with `torch.load(buf, weights_only=False)` it is a deep copy of the module (the
    "clone by serialisation" idiom), and no one else ever loads it. It is reported only where the
    function loads it back in a way torch 2.13 refuses: without `weights_only=False` (nor a `pickle_module`, which
    turns the full unpickle on, nor the classes allowed through `torch.serialization.safe_globals` /
    `add_safe_globals` in the file), the load raises `UnpicklingError`.

    ## Why is this bad?
    The file then holds a pickle of the model's class by import path. On torch 2.13 the default
    `torch.load(path)` (`weights_only=True`) refuses it with `UnpicklingError: Weights only load
    failed`, so every consumer has to pass `weights_only=False` — a full unpickle that runs any
    code the file contains — and the load still breaks as soon as the class is renamed or moved.
    A copy made through a buffer the same function fills and reads has neither problem: the bytes
    are its own, and the class is importable since the module exists.

    ## Fix safety
    No autofix: save `model.state_dict()` and load it into a freshly built model with
    `model.load_state_dict(torch.load(path))`, which also changes the loading code. For an
    in-memory copy, `copy.deepcopy(model)` or `torch.load(buf, weights_only=False)`.
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
""", """
import io
import torch
from torch import nn
def clone(net: nn.Module) -> nn.Module:
    with io.BytesIO() as buf:
        torch.save(net, buf)
        buf.seek(0)
        return torch.load(buf, weights_only=False)
""", """
from io import BytesIO
import torch
import torch.nn as nn
class Tower(nn.Module):
    pass
def replicas(n):
    base = Tower()
    out = []
    for _ in range(n):
        blob = BytesIO()
        torch.save(obj=base, f=blob)
        blob.seek(0)
        out.append(torch.load(f=blob, map_location="cpu", weights_only=False))
    return out
""", """
import pickle
import tempfile
import torch
from torch import nn
def copy_through_disk(encoder: nn.Module):
    with tempfile.TemporaryFile() as tmp:
        torch.save(encoder, tmp)
        tmp.seek(0)
        twin = torch.load(tmp, pickle_module=pickle)
    return twin
""", """
import io
import tempfile
import torch
from torch import nn
def serialized_size(head: nn.Module) -> int:
    spool = tempfile.SpooledTemporaryFile(max_size=1 << 20)
    torch.save(head, spool)
    size = spool.tell()
    spool.close()
    return size
def copy_allowed(model: nn.Sequential):
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    with torch.serialization.safe_globals([nn.Sequential, nn.Linear]):
        return torch.load(buffer)
""", """
import io
import torch
from torch import nn
backbone = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
frozen = io.BytesIO()
torch.save(backbone, frozen)
frozen.seek(0)
teacher = torch.load(frozen, weights_only=False).eval()
""", """
import io
import torch
from torch import nn
class Student(nn.Module):
    def snapshot(self):
        if self.training:
            buf = io.BytesIO()
            torch.save(self, buf)
        else:
            buf = io.BytesIO()
            torch.save(Student(), buf)
        buf.seek(0)
        return torch.load(buf, weights_only=False)
"""]
    invalid = ["""
import torch
from torch import nn
class Net(nn.Module):
    pass
model = Net()
torch.save(model, "model.pt")
""", Invalid("""
import io
import torch
from torch import nn
def serialize(net: nn.Module) -> bytes:
    buf = io.BytesIO()
    torch.save(net, buf)
    return buf.getvalue()
def to_store(net: nn.Module, store):
    with io.BytesIO() as buf:
        torch.save(net, buf)
        store.put("model", buf)
""", count=2), Invalid("""
from io import BytesIO
import torch
import torch.nn as nn
def clone(layer: nn.Module):
    blob = BytesIO()
    torch.save(layer, blob)
    blob.seek(0)
    return torch.load(blob)
def clone_strict(layer: nn.Module):
    blob = BytesIO()
    torch.save(layer, f=blob)
    blob.seek(0)
    return torch.load(blob, map_location="cpu", weights_only=True)
""", count=2), Invalid("""
import io
import torch
from torch import nn
class Cache:
    def keep(self, model: nn.Module):
        self.buf = io.BytesIO()
        torch.save(model, self.buf)
def kept(model: nn.Module, buffers):
    buf = io.BytesIO()
    buffers.append(buf)
    torch.save(model, buf)
""", count=2)]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        if ctx.call_name(node) != "torch.save":
            return
        obj = argument(node, "obj", 0)
        if obj is None:
            return
        kinds = ctx.kinds(obj, hints=False)
        if MODULE not in kinds or DDP in kinds:
            return
        loads = _loads_of_own_buffer(argument(node, "f", 1), node, ctx)
        if loads is None:
            yield self.hit(node, subject=ctx.locator.source(obj))
        elif any(_refused(load, ctx) for load in loads):
            yield self.hit(node, _REFUSED, subject=ctx.locator.source(obj), fix_hint=_REFUSED_FIX)


_REFUSED = ("the whole module is pickled into a buffer this function loads back without `weights_only=False`: "
            "on torch 2.13 that `torch.load` raises `UnpicklingError`")
_REFUSED_FIX = "pass `weights_only=False` to the load of your own buffer, or copy with `copy.deepcopy(model)`"


def _loads_of_own_buffer(target: ast.expr | None, save: ast.Call, ctx: FileContext) -> list[ast.Call] | None:
    """The ``torch.load`` calls that read ``target`` when it is an in-memory file object this function (or
    script) creates and whose bytes never leave it; None when it is any other file."""
    if isinstance(target, ast.Call):
        return [] if ctx.call_name(target) in IN_MEMORY_FILES else None  # saved, then dropped
    if not isinstance(target, ast.Name):
        return None
    scope = ctx.scope(save)
    bindings = ctx.bindings(target)
    if not bindings or any(
            not (isinstance(v, ast.Call) and ctx.call_name(v) in IN_MEMORY_FILES)
            or isinstance(o, ast.arg) or ctx.scope(o) is not scope for o, v in bindings):
        return None
    loads: list[ast.Call] = []
    for use in ast.walk(scope):  # nested functions too: a closure may hand the buffer on
        if not (isinstance(use, ast.Name) and use.id == target.id) or isinstance(use.ctx, ast.Store):
            continue
        if isinstance(use.ctx, ast.Del) or ctx.parent(use) in (b for b, _ in bindings):
            continue
        parent = ctx.parent(use)
        if isinstance(parent, ast.withitem) and parent.context_expr is use:
            continue  # ``with buf:`` closes it
        if isinstance(parent, ast.Attribute) and parent.attr in _BUFFER_METHODS and isinstance(
                ctx.parent(parent), ast.Call):
            continue
        call = parent if isinstance(parent, ast.Call) else ctx.parent(parent) if isinstance(
            parent, ast.keyword) else None
        if isinstance(call, ast.Call) and use in (argument(call, "f", 1), argument(call, "f", 0)):
            name = ctx.call_name(call)
            if name in TORCH_SAVE and argument(call, "f", 1) is use:
                continue
            if name in TORCH_LOAD and argument(call, "f", 0) is use:
                loads.append(call)
                continue
        return None  # returned, stored, passed on, its bytes read: it may be an artifact after all
    return loads


def _refused(load: ast.Call, ctx: FileContext) -> bool:
    """A ``torch.load`` that torch 2.13 refuses on a pickled module: ``weights_only`` left to its default or
    True, no ``pickle_module``, and no class allowed by ``safe_globals`` / ``add_safe_globals`` in the file."""
    weights_only = keyword(load, "weights_only")
    if weights_only is not None and not is_const(weights_only, True):
        return False
    if keyword(load, "pickle_module") is not None or len(load.args) > 2:
        return False
    return not any(word in ctx.source.text for word in ("safe_globals", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"))
