"""Where a loaded file comes from, and what the code does with what it loads (TP951).

An explicit ``torch.load(f, weights_only=False)`` is worth a finding only when both hold:

- the file comes from outside the program: its path derives (through the names of the function,
  ``os.path.join``, f-strings, loops over lists of paths) from a parameter of the function, the
  command line (``sys.argv``, ``parser.parse_args()``), the environment, or a download
  (``hf_hub_download``, ``download_url_to_file``, ``urlretrieve``...) — and not from a temporary
  directory (a name with ``tmp``/``temp``, ``tempfile``) the program writes to itself;
- what it loads is what ``weights_only=True`` loads too (tensors, and containers of tensors, numbers
  and strings): every use of the result is ``load_state_dict`` (``nn.Module``'s, an optimizer's,
  torch's ``set_model_state_dict``: they take a mapping of tensors and plain values) or a tensor read
  (``.to()``, ``.float()``, ``.shape``, ``torch.is_tensor``), directly, through the name it is bound
  to, as the list of such loads (a key test, ``"module" in sd``, reads nothing), or as the argument of
  a function of this file whose parameter is used only so. A result read for its keys (``ckpt["epoch"]``,
  ``pkg["klass"]``), handed to code the analysis does not follow (a helper of another module, whatever
  its name says: demucs' ``load_model(pkg)`` reads a pickled class from it) or returned may hold
  pickled objects (a config, a Namespace, a class, a whole module) that only full unpickling restores:
  spelling out ``weights_only=False`` there is the format's need.
"""

from __future__ import annotations

import ast
import re

from torchpact.lint.context import FileContext
from torchpact.lint.analysis.following import follows_definitions

_DOWNLOAD = re.compile(r"download|hf_hub|urlretrieve|urlopen|cached_file|cached_path|load_url|get_file", re.I)
_TEMP = re.compile(r"(^|_)(tmp|temp)(_|$|dir|path|file)|tempfile", re.I)
# Calls that take a mapping of tensors and plain values, as ``weights_only=True`` loads it.
_LOADS_INTO_MODEL = frozenset({"load_state_dict", "set_model_state_dict", "set_state_dict"})
_TENSOR_READS = frozenset({
    "to", "cuda", "cpu", "float", "half", "double", "bfloat16", "flatten", "view", "reshape", "numel",
    "shape", "dtype", "device", "size", "dim", "ndim", "contiguous", "clone", "detach", "numpy", "tolist",
})
_DEPTH = 5
OUTSIDE, OWN = "outside", "own"


def comes_from_outside(path: ast.AST, ctx: FileContext) -> bool:
    origins = _origins(path, ctx, _DEPTH)
    return OUTSIDE in origins and OWN not in origins


def _origins(expr: ast.AST, ctx: FileContext, depth: int) -> set[str]:
    out: set[str] = set()
    if depth <= 0:
        return out
    for node in ast.walk(expr):
        if isinstance(node, ast.Name):
            if _TEMP.search(node.id):
                out.add(OWN)
            out |= _name_origins(node, ctx, depth)
        elif isinstance(node, ast.Attribute):
            if _TEMP.search(node.attr):
                out.add(OWN)
            qn = ctx.resolve(node) or ""
            if qn in ("sys.argv", "os.environ"):
                out.add(OUTSIDE)
        elif isinstance(node, ast.Call):
            name = ctx.call_name(node) or _last_name(node.func)
            if name.startswith("tempfile."):
                out.add(OWN)
            elif _DOWNLOAD.search(name.rsplit(".", 1)[-1]) or name in ("os.getenv", "os.environ.get"):
                out.add(OUTSIDE)
            elif name.rsplit(".", 1)[-1] in ("parse_args", "parse_known_args"):
                out.add(OUTSIDE)
    return out


@follows_definitions(frozenset())
def _name_origins(name: ast.Name, ctx: FileContext, depth: int) -> set[str]:
    out: set[str] = set()
    for owner, value in ctx.bindings(name):
        if isinstance(owner, ast.arg):
            if owner.arg not in ("self", "cls"):
                out.add(OUTSIDE)  # whatever the caller passes
        elif isinstance(owner, (ast.For, ast.AsyncFor, ast.comprehension)):
            out |= _origins(owner.iter, ctx, depth - 1)
        elif value is not None:
            inner = (getattr(value, "iterable", None) or getattr(value, "value", None)
                     if not isinstance(value, ast.expr) else value)
            if isinstance(inner, ast.AST):
                out |= _origins(inner, ctx, depth - 1)
    return out


def _last_name(func: ast.AST) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


# ---------------------------------------------------------------------------------------- content
def loaded_as_weights(load: ast.Call, ctx: FileContext) -> bool:
    """Every use of what ``load`` returns is a load into a model or a tensor read (and there is one)."""
    return _uses_as_weights(load, ctx, _DEPTH) is True


def _uses_as_weights(expr: ast.AST, ctx: FileContext, depth: int) -> bool | None:
    """True: used as weights; False: used otherwise; None: not used at all (neutral)."""
    if depth <= 0:
        return False
    parent = ctx.parent(expr)
    if isinstance(parent, ast.keyword):
        expr, parent = parent, ctx.parent(parent)
    if isinstance(parent, ast.Call) and expr is not parent.func:
        name = ctx.call_name(parent) or _last_name(parent.func)
        if name.rsplit(".", 1)[-1] in _LOADS_INTO_MODEL or name == "torch.is_tensor":
            return True
        return _helper_uses_as_weights(parent, expr, ctx, depth - 1)
    if isinstance(parent, ast.Attribute):
        return parent.attr in _TENSOR_READS
    if isinstance(parent, ast.Compare) and expr is not parent.left \
            and all(isinstance(op, (ast.In, ast.NotIn)) for op in parent.ops):
        return None  # `"module" in sd`: a key test reads none of the content
    if isinstance(parent, (ast.List, ast.Tuple)) and isinstance(parent.ctx, ast.Load):
        return _uses_as_weights(parent, ctx, depth - 1)  # `[torch.load(f)]`: a list of loaded files
    if isinstance(parent, ast.ListComp) and expr is parent.elt:
        return _uses_as_weights(parent, ctx, depth - 1)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
        return _name_used_as_weights(parent.targets[0].id, parent, ctx, depth - 1)
    return False


def _helper_uses_as_weights(call: ast.Call, arg: ast.AST, ctx: FileContext, depth: int) -> bool | None:
    """``helper(..., loaded, ...)`` where every function of this file by that name uses the parameter
    it receives only as weights; False for a callee the analysis does not see."""
    func = call.func
    if isinstance(func, ast.Name):
        candidates = [f for f in ctx.functions.get(func.id, []) if not isinstance(ctx.parent(f), ast.ClassDef)]
        offset = 0
    elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self" and (
            cls := ctx.enclosing_class(call)) is not None:
        candidates, offset = [m for m in [ctx.method(cls, func.attr)] if m is not None], 1
    else:
        return False
    if not candidates or any(isinstance(a, ast.Starred) for a in call.args):
        return False
    verdicts = []
    for fn in candidates:
        params = [*fn.args.posonlyargs, *fn.args.args]
        if isinstance(arg, ast.keyword):
            param = next((p for p in [*params, *fn.args.kwonlyargs] if p.arg == arg.arg), None)
        else:
            index = next((i + offset for i, a in enumerate(call.args) if a is arg), len(params))
            param = params[index] if index < len(params) else None
        if param is None:
            return False
        verdicts.append(_name_used_as_weights(param.arg, param, ctx, depth))
    if any(v is False for v in verdicts):
        return False
    return True if any(v is True for v in verdicts) else None


@follows_definitions(False)
def _name_used_as_weights(name: str, owner: ast.AST, ctx: FileContext, depth: int) -> bool | None:
    scope = ctx.scope(owner)
    body = scope.body if isinstance(getattr(scope, "body", None), list) else [scope]
    verdicts: list[bool | None] = []
    for node in ctx.walk_scope(body):
        if not (isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)):
            continue
        if not any(o is owner for o, _ in ctx.bindings(node)):
            continue
        parent = ctx.parent(node)
        if isinstance(parent, (ast.For, ast.AsyncFor)) and parent.iter is node:
            # `for sd in shards:` the element's uses decide
            if isinstance(parent.target, ast.Name):
                verdicts.append(_name_used_as_weights(parent.target.id, parent, ctx, depth - 1))
            else:
                verdicts.append(False)
        elif isinstance(parent, ast.comprehension) and parent.iter is node and not _target_used(parent, ctx):
            verdicts.append(None)  # `[None for _ in sds]`: releases the list
        else:
            verdicts.append(_uses_as_weights(node, ctx, depth - 1))
    if any(v is False for v in verdicts):
        return False
    return True if any(v is True for v in verdicts) else None


def _target_used(gen: ast.comprehension, ctx: FileContext) -> bool:
    comp = ctx.parent(gen)
    names = {n.id for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
    parts = [getattr(comp, "elt", None), getattr(comp, "key", None), getattr(comp, "value", None), *gen.ifs]
    return any(isinstance(n, ast.Name) and n.id in names for p in parts if p is not None for n in ast.walk(p))
