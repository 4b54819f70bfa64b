from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, is_const, keyword
from torchpact.lint.rule import Hit, Invalid, Rule, last_names
from torchpact.lint.rules.security._checkpoint_use import comes_from_outside, loaded_as_weights
from torchpact.lint.rules.security._sources import TORCH_SAVE, downloaded

TORCH_LOAD = {"torch.load", "torch.serialization.load"}
LOAD_FROM_URL = {"torch.hub.load_state_dict_from_url", "torch.utils.model_zoo.load_url"}


class LoadWithFullPickle(Rule):
    """A checkpoint is fully unpickled (`weights_only=False`): loading it runs code from the file.

    ## What it does
    Flags `torch.load(..., pickle_module=...)` without `weights_only`, whose default is then
    `False` (with `weights_only=True` as well, torch raises "Can not safely load weights when
    explicit pickle_module is specified"), where it is actionable as for an explicit
    `weights_only=False` below: the file is downloaded by the same code, or it comes from outside
    the program and only weights are used from it. A pickler of one's own (`dill`) is otherwise a
    choice of format: a load of whole objects that such a pickler wrote (a library's own checkpoint
    of a training strategy, read back for its objects), which `weights_only=True` cannot load, is
    not reported. Also flags `torch.hub.load_state_dict_from_url(...)` (also
    `torch.utils.model_zoo.load_url`) unless it passes `weights_only=True`: on torch 2.13 its
    `weights_only` still defaults to `False`, so a downloaded file is fully unpickled (spelled out
    there, `weights_only=False` is reported as an `info`: the file is downloaded, and a state dict).

    An explicit `torch.load(..., weights_only=False)` is a decision; it is reported (as an `info`)
    only where it is actionable, when both hold: the file comes from outside the program — its path
    derives from a parameter of the function, the command line (`sys.argv`, `parse_args()`), the
    environment, or a call whose name says it downloads (`maybe_download_weights(...)`; the known
    downloads below are warnings), and not from a temporary directory the program writes itself —
    and what is loaded is what `weights_only=True` loads too (tensors, and dicts, lists and tuples of
    tensors, numbers and strings): every use of the result is `load_state_dict` (a module's or an
    optimizer's, `set_model_state_dict`: they take a mapping of tensors and plain values) or a tensor
    read (`.to()`, `.float()`, `.shape`, `torch.is_tensor`), directly, through its name, as a list of
    such loads, or as the argument of a function of this file whose parameter is itself used only so.
    A result read for other keys (`ckpt["args"]`, `pkg["klass"]`), handed to code the analysis does
    not follow (a helper of another module, whatever its name: a `load_model(pkg)` that builds
    `pkg["klass"](*pkg["args"])`) or returned may hold pickled objects that only full unpickling
    restores (a config, a Namespace, a class, a whole module; `weights_only=True` refuses a dict
    holding `nn.Linear` itself with `UnpicklingError`): there the option is the format's need, and no
    finding. Nor is a load of a file the same function
    has just written with `torch.save` (directly, through `with open(path, "wb")` or through a
    helper of the file), nor a load in the `except TypeError` handler of a `try` whose body makes the
    same kind of call with `weights_only=`: that handler runs only on a torch whose loader has no
    `weights_only` (before 1.13), where no safer call exists; on torch 2.13 the call in the `try`
    succeeds.

    Where the same code fetched the file from the network — its path or bytes come from
    `hf_hub_download`, `cached_path`, `urlretrieve`, `requests.get`, a URL, or
    `download_url_to_file`'s destination — an explicit `weights_only=False` is a `warning`, whatever
    is used from the file and in a test module as anywhere else: whoever serves the file runs code in
    the process that loads it.

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
    requires = (
        "the call resolves to `torch.load` (or the hub / model_zoo loaders) and unpickles fully",
    )
    facts = ("load-defaults-to-weights-only",)
    message = ("the checkpoint is fully unpickled (`weights_only=False`): a malicious file runs arbitrary "
               "code the moment it is loaded")
    fix_hint = ("load with `weights_only=True` (allow your own classes with "
                "`torch.serialization.add_safe_globals`); keep full unpickling only for files you created")
    nodes = (ast.Call,)
    calls = last_names(TORCH_LOAD, LOAD_FROM_URL)
    triggers = ("load",)

    valid = [
        """
import torch
state = torch.load("model.pt", map_location="cpu")
model.load_state_dict(torch.load("model.pt", weights_only=True))
""",
        """
import torch
ckpt = torch.load("checkpoint.pt", map_location="cpu", weights_only=False)
start_epoch = ckpt["epoch"] + 1
""",
        """
import torch

def resume(trainer, path):
    state = torch.load(path, map_location="cpu", weights_only=False)
    trainer.config = state["config"]
    trainer.model.load_state_dict(state["model"])
""",
        """
import os
import torch

def merge_fragments(tmp_dir, names):
    parts = []
    for name in names:
        frag = torch.load(os.path.join(tmp_dir, f"{name}.pt"), weights_only=False)
        parts.append(frag.flatten())
    return torch.cat(parts)
""",
        """
import torch

class Store:
    def load(self, filename):
        with open(filename, "rb") as fh:
            self.set_state(torch.load(fh, weights_only=False))
""",
        """
import torch

def load_full(path):
    net = torch.load(path, weights_only=False)
    net.eval()
    return net
""",
        """
import torch

class Resumer:
    def restore(self, model):
        model.load_state_dict(torch.load(self.checkpoint_file, weights_only=False))
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
        """
import torch
def test_state_round_trip(state, save_path):
    with open(save_path, "wb") as fh:
        torch.save(state.state_dict(), fh)
    assert torch.load(save_path, weights_only=False).keys()
""",
        """
import torch
def write_fixture(path, n):
    torch.save(torch.randn(n), path)
def test_fixture(tmp_path):
    path = tmp_path / "x.pt"
    write_fixture(path, 4)
    assert torch.load(path, weights_only=False).shape == (4,)
""",
        """
import dill
import torch

def maybe_resume(strategy, fname, map_location=None):
    ckp = torch.load(fname, pickle_module=dill, map_location=map_location)
    strategy.__dict__.update(ckp["strategy"].__dict__)
    return strategy, ckp["exp_counter"]
""",
        """
from torch import load
import dill
def restore(path):
    return load(path, pickle_module=dill)
""",
        """
import argparse
import cloudpickle
import torch
args = argparse.ArgumentParser().parse_args()
agent = torch.load(args.agent, "cpu", cloudpickle)
agent.act(observation)
""",
        """
import os
import dill
import torch

def _read(p):
    return torch.load(p, pickle_module=dill)

def resume(run_dir):
    path = os.path.join(run_dir, "trainer.pkl")
    if os.path.exists(path):
        trainer = _read(path)
        trainer.fit()
""",
        """
import dill
import torch
state = torch.load("cache/strategy.pkl", pickle_module=dill)
model.load_state_dict(state.model)
""",
        """
import dill
import torch
def checkpoint_round_trip(strategy, fname):
    torch.save(strategy, fname, pickle_module=dill)
    again = torch.load(fname, pickle_module=dill)
    again.model.load_state_dict(strategy.model.state_dict())
""",
        """
from torch.hub import load_state_dict_from_url

def fetch_weights(url):
    try:
        return load_state_dict_from_url(url, map_location="cpu", progress=False, weights_only=True)
    except TypeError:  # torch < 1.13 has no weights_only
        return load_state_dict_from_url(url, map_location="cpu", progress=False)
""",
        """
import torch
from mypkg.states import load_model

def check_conversion(checkpoint):
    return load_model(torch.load(checkpoint, "cpu", weights_only=False))
""",
        """
import torch

def build(package):
    model = package["klass"](*package["args"], **package["kwargs"])
    model.load_state_dict(package["state"])
    return model

def restore(path):
    return build(torch.load(path, map_location="cpu", weights_only=False))
""",
        """
import torch

class Zoo:
    def _instantiate(self, spec):
        return spec["klass"](**spec["kwargs"])

    def open(self, source):
        blob = torch.load(source, weights_only=False)
        return self._instantiate(spec=blob)
""",
        """
import torch
from trainer_utils import apply_checkpoint

def load_weights(net, ckpt):
    apply_checkpoint(net, ckpt)

def warm_start(net, path):
    load_weights(net, torch.load(path, weights_only=False))
""",
        """
import torch
import restore_lib

def ensemble(files):
    members = []
    for f in files:
        members.append(restore_lib.load_weights(torch.load(f, weights_only=False)))
    return members
""",
    ]
    invalid = [
        Invalid("""
from torch.hub import load_state_dict_from_url

def fetch_weights(url):
    try:
        return load_state_dict_from_url(url, map_location="cpu", progress=False, weights_only=True)
    except KeyError:
        return load_state_dict_from_url(url, map_location="cpu", progress=False)
"""),
        Invalid("""
import torch

def load_weights(model, path):
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=False))
""", severity=Severity.INFO),
        Invalid("""
import argparse
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--weights")
args = parser.parse_args()
sd = torch.load(args.weights, weights_only=False)
net.load_state_dict(sd, strict=False)
""", severity=Severity.INFO),
        Invalid("""
from huggingface_hub import hf_hub_download
import torch

def from_hub(model, repo):
    local = hf_hub_download(repo, "pytorch_model.bin")
    state_dict = torch.load(local, map_location="cpu", weights_only=False)
    model.load_state_dict(state_dict=state_dict)
"""),
        Invalid("""
import os
import torch

def load_shards(model, root, files):
    shards = [torch.load(os.path.join(root, f), weights_only=False) for f in files]
    for shard in shards:
        model.load_state_dict(shard, strict=False)
    shards = [None for _ in shards]
""", severity=Severity.INFO),
        Invalid("""
import sys
import torch

table = torch.load(sys.argv[1], weights_only=False).to("cuda")
""", severity=Severity.INFO),
        """
import torch
import dill
def load_weights(model, path):
    model.load_state_dict(torch.load(path, pickle_module=dill))
""",
        """
import sys
import pickle
import torch
net.load_state_dict(torch.load(sys.argv[1], "cpu", pickle))
""",
        """
import os
import pickle
import torch
def load_parts(model, root, files):
    for f in files:
        model.load_state_dict(torch.load(os.path.join(root, f), pickle_module=pickle), strict=False)
""",
        """
import dill
import torch
from huggingface_hub import hf_hub_download
def fetch(repo):
    local = hf_hub_download(repo, "agent.pkl")
    return torch.load(local, map_location="cpu", pickle_module=dill)
""",
        """
import torch.hub
state_dict = torch.hub.load_state_dict_from_url("https://example.com/resnet.pth", progress=False)
""",
        """
import torch
from huggingface_hub import hf_hub_download
def fetch(repo):
    path = hf_hub_download(repo, "training_args.bin")
    return torch.load(path, weights_only=False)
""",
        """
import torch
def fetch(url, dst):
    torch.hub.download_url_to_file(url, dst)
    return torch.load(dst, map_location="cpu", weights_only=False)
""",
        Invalid("""
import torch

def load_weights(net, state):
    net.load_state_dict(state)

def warm_start(net, path):
    load_weights(net, torch.load(path, map_location="cpu", weights_only=False))
""", severity=Severity.INFO),
        Invalid("""
import torch

class Zoo:
    def _apply(self, spec):
        self.model.load_state_dict(spec, strict=False)

    def open(self, source):
        blob = torch.load(source, weights_only=False)
        self._apply(spec=blob)
""", severity=Severity.INFO),
        Invalid("""
import torch

def to_device(table):
    return table.to("cuda")

def ensemble(files):
    members = []
    for f in files:
        members.append(to_device(torch.load(f, weights_only=False)))
    return members
""", severity=Severity.INFO),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        name = ctx.call_name(node)
        if name is None or (name not in TORCH_LOAD and name not in LOAD_FROM_URL):
            return
        assert isinstance(node, ast.Call)
        if any(k.arg is None for k in node.keywords):
            return  # **kwargs may carry weights_only
        if compat_fallback(node, ctx, TORCH_LOAD if name in TORCH_LOAD else LOAD_FROM_URL):
            return
        weights_only = keyword(node, "weights_only")
        if weights_only is None and name in LOAD_FROM_URL and len(node.args) >= 7:
            weights_only = node.args[6]
        shown = ctx.locator.source(node.func)
        if weights_only is not None:
            if is_const(weights_only, False) and not round_trip(node, ctx):
                if downloaded(node, ctx):
                    yield self.hit(node, subject=shown, message=(
                        "a file this code downloads is fully unpickled (`weights_only=False`): whoever "
                        "serves it runs arbitrary code the moment it is loaded"))
                elif name in LOAD_FROM_URL or _outside_weights(node, ctx):
                    # spelled out, full unpickling is a decision: worth a word only where it buys nothing
                    what = ("the downloaded file is fully unpickled (`weights_only=False`)"
                            if name in LOAD_FROM_URL else
                            "a file from outside the program is fully unpickled (`weights_only=False`) although only "
                            "weights are used from it, which `weights_only=True` loads")
                    yield self.hit(node, subject=shown, severity=Severity.INFO,
                                   message=f"{what}: a malicious file runs arbitrary code the moment it is loaded")
            return
        if name in LOAD_FROM_URL:
            yield self.hit(node, subject=shown, message=(
                f"`{shown}` fully unpickles the downloaded file (its `weights_only` defaults to False even on "
                "torch 2.13): a malicious file runs arbitrary code the moment it is loaded"),
                fix_hint="pass `weights_only=True`")
        elif ((keyword(node, "pickle_module") is not None or len(node.args) >= 3) and not round_trip(node, ctx)
              and (downloaded(node, ctx) or _outside_weights(node, ctx))):
            # a pickler of one's own is a choice of format (torch refuses it with weights_only=True):
            # worth a finding only where the file is untrusted and holds what the default loader reads
            yield self.hit(node, subject=shown, message=(
                "passing `pickle_module` makes `torch.load` default to `weights_only=False`: the file is fully "
                "unpickled and a malicious one runs arbitrary code the moment it is loaded"),
                fix_hint=("drop `pickle_module` and pass `weights_only=True` (torch refuses the two together: "
                          "\"Can not safely load weights when explicit pickle_module is specified\")"))


def compat_fallback(load: ast.Call, ctx: FileContext, loaders: set[str]) -> bool:
    """``try: torch.load(f, weights_only=True) except TypeError: torch.load(f)``: the fallback only runs
    on a torch too old to know ``weights_only`` (< 1.13), where there is no safe loader to ask for.
    ``loaders``: the calls of the ``try`` that count (the family of ``load``)."""
    child: ast.AST = load
    for anc in ctx.ancestors(load):
        if isinstance(anc, ast.ExceptHandler):
            handler = anc
        elif isinstance(anc, (ast.Try, getattr(ast, "TryStar", ast.Try))) and isinstance(child, ast.ExceptHandler):
            names = ({n.id if isinstance(n, ast.Name) else getattr(n, "attr", "") for n in ast.walk(handler.type)}
                     if handler.type else set())
            if "TypeError" in names and any(
                    isinstance(n, ast.Call) and ctx.call_name(n) in loaders
                    and keyword(n, "weights_only") is not None
                    for stmt in anc.body for n in ast.walk(stmt)):
                return True
            return False
        elif isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return False
        child = anc
    return False


def _outside_weights(load: ast.Call, ctx: FileContext) -> bool:
    source = load.args[0] if load.args else keyword(load, "f")
    return source is not None and comes_from_outside(source, ctx) and loaded_as_weights(load, ctx)


def round_trip(load: ast.Call, ctx: FileContext) -> bool:
    """The file ``torch.load`` reads is one this code just wrote, not untrusted input: an earlier
    ``torch.save(obj, f)`` in the same function to the same path or buffer, directly, through
    ``with open(path, "wb") as fh``, or through a function of this file that saves to its argument."""
    source = load.args[0] if load.args else keyword(load, "f")
    if source is None:
        return False
    wanted = ast.dump(source)
    scope = ctx.scope(load)
    body = scope.body if isinstance(getattr(scope, "body", None), list) else [scope]
    for node in ctx.walk_scope(body):
        if not isinstance(node, ast.Call) or node.lineno > load.lineno:
            continue
        if ctx.call_name(node) in TORCH_SAVE:
            target = node.args[1] if len(node.args) >= 2 else keyword(node, "f")
            if target is not None and wanted in _written_paths(target, ctx):
                return True
        elif any(ast.dump(a) == wanted for a in node.args) and _saves_an_argument(node, ctx):
            return True
    return False


def _written_paths(target: ast.AST, ctx: FileContext) -> set[str]:
    """What ``torch.save`` writes to: the target itself, and the path of ``open(path, "wb")`` when the
    target is the handle of a ``with`` block."""
    out = {ast.dump(target)}
    if isinstance(target, ast.Name):
        for owner, value in ctx.bindings(target):
            if isinstance(owner, ast.withitem) and isinstance(value, ast.Call) and value.args:
                out.add(ast.dump(value.args[0]))
    return out


def _saves_an_argument(call: ast.Call, ctx: FileContext) -> bool:
    """``helper(obj, path)`` where a function of this file by that name ``torch.save``s to a parameter."""
    name = call.func.id if isinstance(call.func, ast.Name) else None
    for fn in ctx.functions.get(name or "", []):
        params = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
        for node in ctx.walk_scope(fn.body):
            if isinstance(node, ast.Call) and ctx.call_name(node) in TORCH_SAVE:
                target = node.args[1] if len(node.args) >= 2 else keyword(node, "f")
                if isinstance(target, ast.Name) and target.id in params:
                    return True
                if isinstance(target, ast.Name) and any(
                        isinstance(o, ast.withitem) and isinstance(v, ast.Call) and v.args
                        and isinstance(v.args[0], ast.Name) and v.args[0].id in params
                        for o, v in ctx.bindings(target)):
                    return True
    return False
