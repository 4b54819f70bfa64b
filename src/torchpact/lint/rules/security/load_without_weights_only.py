from __future__ import annotations

import ast
import re
import sys
from typing import Iterator

from torchpact.config import torch_floor_from_dependencies
from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, keyword
from torchpact.lint.rule import Hit, Invalid, Rule, last_names
from torchpact.lint.rules.security._sources import downloaded, written_here
from torchpact.lint.rules.security.load_with_full_pickle import TORCH_LOAD, compat_fallback, round_trip
from torchpact.lint.torch_version import runs_on_some

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

SAFE_DEFAULT_SINCE = (2, 6)
# PEP 723 inline script metadata: a single-file script declaring its own dependencies.
_SCRIPT_BLOCK = re.compile(r"(?m)^# /// script\s*$\n(?P<content>(?:^#(?: .*)?$\n)+?)^# ///\s*$")


class LoadWithoutWeightsOnly(Rule):
    """`torch.load` without `weights_only` fully unpickles on torch < 2.6, which the code must support.

    ## What it does
    Flags `torch.load(...)` calls that do not pass `weights_only`, when the oldest torch the
    project supports is below 2.6: `min-torch` in `[tool.torchpact]`, `--min-torch`, or the torch
    floor the file's closest project declares (e.g. `"torch>=2.1"` in `[project] dependencies`,
    `setup.cfg`, `setup.py`'s `install_requires` or `requirements*.txt`), or that of the file's own inline
    script metadata (a PEP 723 `# /// script` block). With none of these the code is assumed to run
    on the installed torch (2.13) and the rule is silent. Only a lower bound or a pin of the
    distribution `torch` itself states a floor (`>=`, `>`, `==`, `~=`; not `torch-audiomentations>=0.12`
    nor `torch_geometric`): an unpinned `torch` (or `torch<3`) lets the installer take the newest
    torch, so it is read as the installed torch, not as a floor of 0.0, and the closest project that
    names torch decides even then (an outer folder's floor does not apply to it). Calls passing
    `pickle_module` or `**kwargs` are left to TP951 / not judged. Not flagged either: loads in test
    modules (`test_*.py`, `tests/`: they read fixtures the repository itself ships or writes, and a
    malicious file there would already be malicious code there) — unless the test fetches the file
    from the network (its path or bytes come from `hf_hub_download`, `cached_path`, `urlretrieve`,
    `requests.get`, a URL, or the destination of `download_url_to_file`: see `_sources.py`), which
    is untrusted input in a test as anywhere —, a load of a file the same code has just written (as
    for TP951) or that this file (module or notebook) writes anywhere — the path a `torch.save` of
    the file writes (the same string, the same name bound by the same definitions, the same attribute
    chain such as a config's `cache_file`: a cache read back before it is rebuilt, a checkpoint an
    earlier cell saved), or a path inside the folder the file hands a training framework's checkpoint
    writer (`ModelCheckpoint(dirname=...)`, `DiskSaver(...)`) —, since replacing the program's own
    output needs write access to it, which already lets an attacker change what runs; a path the user
    gives (a command-line argument, a config's `resume_from`, a public loader's parameter) that the
    file never writes stays a finding, as does a downloaded one; and the compatibility fallback
    `except TypeError: torch.load(f)` after a `torch.load(f, weights_only=...)` that an older torch
    rejected. Nor a load that torch < 2.6 never reaches: under a branch a `torch.__version__`
    test keeps to torch >= 2.6 (evaluated for each supported version below 2.6, lint/torch_version.py),
    or a second load of the same path (the same expression, bound by the same definitions) that
    runs only after an earlier load of it in the same function started — a later statement of an
    enclosing block, or the `except` handler of a `try` that begins with it: the file was already
    unpickled there, and that first load is the finding.

    ## Why is this bad?
    Before torch 2.6 `weights_only` defaulted to `False`: the same line that is safe on torch 2.13
    fully unpickles the file on the older versions the project supports, so a malicious checkpoint
    runs arbitrary code there. torch 2.13 says so in its own error text ("In PyTorch 2.6, we changed
    the default value of the `weights_only` argument in `torch.load` from `False` to `True`"), and
    its `TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1` switch restores the old default: in the proof, a
    checkpoint whose pickled object calls `open(marker, "w")` creates the marker under the old
    default, while an explicit `weights_only=True` still refuses it.

    ## Fix safety
    No autofix, because adding `weights_only=True` changes what loads: checkpoints that pickle
    objects other than tensors, containers and primitives (an `argparse.Namespace`, a whole
    `nn.Module`, numpy arrays) then fail with `UnpicklingError` until those classes are allowed
    with `torch.serialization.add_safe_globals` (torch >= 2.4). Pass `weights_only=True` for
    files that may come from elsewhere, or `weights_only=False` to state that the file is trusted
    and needs full unpickling. `weights_only` itself exists since torch 1.13.
    """

    code = "TP952"
    category = Category.SECURITY
    severity = Severity.WARNING
    requires = (
        "the call resolves to `torch.load` without `weights_only`, and the project's oldest torch is below "
        "2.6",
    )
    facts = ("load-defaults-to-weights-only",)
    message = ("`torch.load` without `weights_only` fully unpickles the file on torch < 2.6, which this "
               "project supports: a malicious checkpoint runs arbitrary code there")
    fix_hint = ("pass `weights_only=True` (or `weights_only=False` for files you created that need full "
                "unpickling)")
    nodes = (ast.Call,)
    calls = last_names(TORCH_LOAD)
    triggers = ("load",)

    valid = [
        """
import torch
state = torch.load("model.pt", weights_only=True)
trusted = torch.load("mine.pt", weights_only=False)  # noqa: TP951
""",
        """
import torch
def restore(path, **kwargs):
    return torch.load(path, **kwargs)
""",
        """
# /// script
# dependencies = ["torch>=1.10"]
# ///
import torch
def load_checkpoint(path, device, weights_only=True):
    try:
        return torch.load(path, map_location=device, weights_only=weights_only)
    except TypeError:
        return torch.load(path, map_location=device)
def round_trip(obj, path):
    torch.save(obj, path)
    return torch.load(path)
""",
        """
# /// script
# dependencies = ["torch>=2.1"]
# ///
import torch
from packaging.version import parse

NEW_DEFAULT = parse(torch.__version__) >= parse("2.6")
TORCH_MINOR = tuple(map(int, torch.__version__.split(".")[:2]))

def read(path):
    if NEW_DEFAULT:
        return torch.load(path)  # only reached where weights_only defaults to True
    return torch.load(path, weights_only=True)

def read_all(paths):
    return ([torch.load(p) for p in paths] if TORCH_MINOR >= (2, 6)
            else [torch.load(p, weights_only=True) for p in paths])
""",
        """
# /// script
# dependencies = ["torch>=2.0"]
# ///
import os
import torch

def build_features(model, cfg):
    if cfg.feature_cache is not None and os.path.isfile(cfg.feature_cache):
        feats = torch.load(cfg.feature_cache, map_location="cpu")
    else:
        feats = {n: p.detach() for n, p in model.named_parameters()}
        if cfg.feature_cache is not None:
            torch.save(feats, cfg.feature_cache)
    return feats
""",
        """
# /// script
# dependencies = ["torch>=1.13"]
# ///
import torch

class Stats:
    def __init__(self, where):
        self.store = where

    def read(self):
        return torch.load(self.store)

    def write(self, table):
        with open(self.store, "wb") as handle:
            torch.save(table, handle)
""",
        """
# /// script
# dependencies = ["torch>=2.2"]
# ///
import torch
RUN_FILE = "runs/last_epoch.pt"

for epoch in range(3):
    torch.save({"epoch": epoch}, RUN_FILE)

resumed = torch.load(f=RUN_FILE, map_location="cpu")
again = torch.load("runs/./last_epoch.pt")
""",
        """
# /// script
# dependencies = ["torch>=2.1"]
# ///
import os
import torch
from ignite.handlers import Checkpoint, DiskSaver, ModelCheckpoint

saver = ModelCheckpoint(dirname="/tmp/gan_ckpts", filename_prefix="")
state = torch.load("/tmp/gan_ckpts/checkpoint_500.pt")

def best_of(run_dir, model):
    handler = Checkpoint({"model": model}, DiskSaver(run_dir), n_saved=1)
    if handler is not None:
        return torch.load(os.path.join(run_dir, "model.pt"))
""",
        """
# /// script
# dependencies = ["torch>=2.0"]
# ///
import torch
from pathlib import Path
from lightning.pytorch.callbacks import ModelCheckpoint

out = Path("checkpoints") / "exp1"
callback = ModelCheckpoint(dirpath=out, save_top_k=2)

def newest(folder):
    return sorted(Path(folder).glob("*.ckpt"))[-1]

weights = [torch.load(newest(out)) for _ in range(1)]
""",
    ]
    # The examples run with the default configuration (torch 2.13): only a script's own metadata can
    # lower the floor there. tests/proofs/test_security.py checks the configured floor.
    invalid = [
        """
# /// script
# requires-python = ">=3.10"
# dependencies = ["numpy", "torch>=2.1,<3"]
# ///
import torch
state = torch.load("checkpoint.pt", map_location="cpu")
model.load_state_dict(torch.load("model.pt", weights_only=True))
""",
        Invalid("""
# /// script
# dependencies = ["torch>=2.2"]
# ///
import torch
from packaging import version

TORCH_VERSION = tuple(int(p) for p in torch.__version__.split(".")[:2])

def restore(model, path, other):
    if TORCH_VERSION >= (2, 4):
        state = torch.load(path)  # 2.4 and 2.5 still default to full unpickling
    else:
        state = None
    try:
        model.load_state_dict(torch.load(other))
    except KeyError:
        other = other + ".bak"
        model.load_state_dict(torch.load(other))
    if version.parse(torch.__version__) < version.parse("2.6"):
        return torch.load(path, map_location="cpu")
    return state

def retry(model, path, first):
    if first:
        model.load_state_dict(torch.load(path))
    else:
        model.load_state_dict(torch.load(path, map_location="cpu"))
""", count=6),
        Invalid("""
# /// script
# dependencies = ["torch>=1.8"]
# ///
import torch

def load_model(model, filename, device):
    try:
        model.load_state_dict(torch.load(filename, map_location=device))
    except KeyError:
        model = torch.nn.DataParallel(model)
        model.load_state_dict(torch.load(filename, map_location=device))
    extra = torch.load(f=filename)
    return model, extra
""", count=1),
        Invalid("""
# /// script
# dependencies = ["torch>=2.0"]
# ///
import os
import torch
from ignite.handlers import ModelCheckpoint

def train(args, model, url):
    torch.save(model.state_dict(), args.output)
    state = torch.load(args.resume_from)            # a path the user gives, never written here

    ModelCheckpoint(dirname="/tmp/run_a")
    other = torch.load("/tmp/run_b/model.pt")       # another folder than the writer's

    torch.save(state, "weights.pt")
    torch.hub.download_url_to_file(url, "weights.pt")
    fetched = torch.load("weights.pt")             # overwritten by a download

class Writer:
    def save(self, obj):
        torch.save(obj, self.path)

class Reader:
    def load(self):
        return torch.load(self.path)               # another class's ``self.path``

def export(obj, path):
    torch.save(obj, path)

def restore(path):
    return torch.load(path)                        # another function's parameter
""", count=5),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        floor = min_torch(ctx)
        if floor >= SAFE_DEFAULT_SINCE:
            return
        if ctx.call_name(node) not in TORCH_LOAD:
            return
        assert isinstance(node, ast.Call)
        if keyword(node, "weights_only") is not None or keyword(node, "pickle_module") is not None:
            return
        if len(node.args) >= 3 or any(k.arg is None for k in node.keywords):
            return
        if compat_fallback(node, ctx, TORCH_LOAD):
            return
        if not runs_on_some(node, ctx, _risky_versions(floor)):
            return  # under a version test that only lets torch >= 2.6 (or no supported torch) reach it
        if _repeats_earlier_load(node, ctx):
            return  # the same file was already unpickled by the load before it, which is the finding
        fetched = downloaded(node, ctx)
        if not fetched and (round_trip(node, ctx) or written_here(node, ctx)):
            return  # the program's own cache or checkpoint: replacing it needs write access to its output
        if ctx.is_test_file and not fetched:
            return  # a test reads fixtures its own repository ships or writes: not untrusted input
        shown = ".".join(map(str, floor))
        yield self.hit(node, message=(
            f"`torch.load` without `weights_only` fully unpickles the file on torch < 2.6 (this code "
            f"supports torch {shown}): a malicious checkpoint runs arbitrary code there"),
            subject=ctx.locator.source(node.func))  # type: ignore[attr-defined]


def _risky_versions(floor: tuple[int, int]) -> list[tuple[int, int]]:
    """The supported torch versions whose ``weights_only`` default is ``False``: floor to 2.5."""
    out = [(1, m) for m in range(floor[1] if floor[0] == 1 else 14, 14)] if floor[0] <= 1 else []
    start = floor[1] if floor[0] == 2 else 0
    return out + [(2, m) for m in range(start, SAFE_DEFAULT_SINCE[1])]


def _repeats_earlier_load(load: ast.Call, ctx: FileContext) -> bool:
    """A load of the same path (the same expression, bound by the same definitions) that can only run
    after an earlier ``torch.load`` of it in the same function started: the earlier one is in a
    statement before it in a block that encloses it, or is the first statement of a ``try`` whose
    handler holds it (``try: m.load_state_dict(torch.load(f)) except KeyError: ... torch.load(f)``)."""
    path = load.args[0] if load.args else keyword(load, "f")
    if path is None:
        return False
    text = ctx.locator.source(path)
    scope = ctx.scope(load)
    earlier = [n for n in ctx.walk_scope(scope.body if hasattr(scope, "body") else [])  # type: ignore[attr-defined]
               if isinstance(n, ast.Call) and n is not load and ctx.call_name(n) in TORCH_LOAD
               and (n.args[:1] or [keyword(n, "f")])[0] is not None
               and ctx.locator.source((n.args[:1] or [keyword(n, "f")])[0]) == text]  # type: ignore[arg-type]
    return any(_same_value(path, (e.args[:1] or [keyword(e, "f")])[0], ctx) and _runs_before(e, load, ctx)
               for e in earlier)


def _same_value(a: ast.AST, b: ast.AST, ctx: FileContext) -> bool:
    names = [n for n in ast.walk(a) if isinstance(n, ast.Name)]
    others = [n for n in ast.walk(b) if isinstance(n, ast.Name)]
    return len(names) == len(others) and all(
        {id(o) for o, _ in ctx.bindings(x)} == {id(o) for o, _ in ctx.bindings(y)}
        for x, y in zip(names, others, strict=True))


def _runs_before(first: ast.AST, then: ast.AST, ctx: FileContext) -> bool:
    """Whether every path to ``then`` went through ``first`` (see ``_repeats_earlier_load``)."""
    child: ast.AST = then
    for anc in ctx.ancestors(then):
        if isinstance(anc, (ast.Try, getattr(ast, "TryStar", ast.Try))) and child in anc.handlers:
            if anc.body and _unconditionally_in(first, anc.body[0], ctx):
                return True
        for field in ("body", "orelse", "finalbody"):
            block = getattr(anc, field, None)
            if isinstance(block, list) and child in block:
                before = block[:block.index(child)]
                if any(_unconditionally_in(first, stmt, ctx) for stmt in before):
                    return True
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return False
        child = anc
    return False


def _unconditionally_in(node: ast.AST, stmt: ast.AST, ctx: FileContext) -> bool:
    """``node`` is ``stmt`` or runs whenever ``stmt`` runs to its end (not under a branch of it)."""
    if node is stmt:
        return True
    for anc in ctx.ancestors(node):
        if isinstance(anc, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                            ast.ClassDef)):
            return False  # a loop body may run zero times; a definition runs nothing
        if anc is stmt:
            return not ctx.conditional(node, ctx.parent(stmt))
    return False


def min_torch(ctx: FileContext) -> tuple[int, int]:
    """The oldest torch this file must run on: the configured floor, lowered by the file's own
    inline script metadata when that allows an older torch."""
    cached = getattr(ctx.tree, "_tp_min_torch", None)
    if cached is None:
        cached = ctx.config.effective_min_torch
        script = _script_torch_floor(ctx.source.text)
        if script is not None:
            cached = min(cached, script)
        ctx.tree._tp_min_torch = cached  # type: ignore[attr-defined]
    return cached


def _script_torch_floor(text: str) -> tuple[int, int] | None:
    if "# /// script" not in text:
        return None
    m = _SCRIPT_BLOCK.search(text)
    if not m:
        return None
    content = "".join(line[2:] if line.startswith("# ") else line[1:] for line in m.group("content").splitlines(True))
    try:
        deps = tomllib.loads(content).get("dependencies", [])
    except tomllib.TOMLDecodeError:
        return None
    return torch_floor_from_dependencies(deps) if isinstance(deps, list) else None
