"""Where the file a ``torch.load`` reads comes from, for the security rules (TP951, TP952).

A file the same code has just written is safe by construction (``round_trip``, in
``load_with_full_pickle``). A file fetched from the network is untrusted input wherever the load
sits, a test module included: the load's source is downloaded when it is (or is a name bound to) the
result of a download call (``hf_hub_download``, ``cached_path``, ``urlretrieve``, ``urlopen``,
``requests.get(...).content``, ``wget.download``...), contains a URL literal, or is the destination
an earlier download call of the same function wrote (``torch.hub.download_url_to_file(url, dst)``).

A file this program writes itself anywhere in the same file (module or notebook) is its own artifact
(``written_here``): a cache read back before it is rebuilt, a checkpoint saved by an earlier cell.
Its path is the target of a ``torch.save`` of the file — the same string, the same name bound by the
same definitions, the same attribute chain (``self.cache_path`` within one class, ``cfg.cache_file``
on one binding of ``cfg``) — or lies in the directory the file gives a training framework's
checkpoint writer (``ModelCheckpoint(dirname=d)`` / ``ModelCheckpoint(dirpath=d)``,
``DiskSaver(d)``): the directory's literal is the path's prefix, or the directory's expression is
part of the path's (``log_path + "/model.pt"``, ``os.path.join(d, name)``, ``latest(d)``). Replacing
such a file needs write access to the program's own output, which already lets an attacker change
what the program runs.
"""

from __future__ import annotations

import ast
import os

from torchpact.lint.context import FileContext, keyword
from torchpact.lint.dataflow import _Unpacked
from torchpact.lint.analysis.following import follows_definitions

# Calls that fetch a file (by the last part of their name) and return its path, bytes or handle.
DOWNLOADERS = frozenset({
    "hf_hub_download", "snapshot_download", "cached_download", "cached_path", "cached_file",
    "download_url_to_file", "urlretrieve", "urlopen", "download_url", "download_file", "download",
    "download_and_extract_archive", "get_file",
})
_HTTP_GETS = frozenset({"requests.get", "httpx.get", "requests.request", "httpx.request"})
_URL = ("http://", "https://", "s3://", "gs://")


def downloaded(load: ast.Call, ctx: FileContext) -> bool:
    """Whether the file ``load`` reads was fetched from the network by this code (see above)."""
    source = load.args[0] if load.args else keyword(load, "f")
    if source is None:
        return False
    if _fetched(source, ctx, depth=3):
        return True
    wanted = ast.dump(source)
    scope = ctx.scope(load)
    body = scope.body if isinstance(getattr(scope, "body", None), list) else [scope]
    for node in ctx.walk_scope(body):
        if not (isinstance(node, ast.Call) and node.lineno <= load.lineno and node is not load):
            continue
        if _is_download(node, ctx) and any(ast.dump(a) == wanted
                                           for a in [*node.args, *(k.value for k in node.keywords)]):
            return True  # download_url_to_file(url, dst) ... torch.load(dst)
    return False


def written_here(load: ast.Call, ctx: FileContext) -> bool:
    """Whether the file ``load`` reads is one this file writes itself (see above)."""
    source = load.args[0] if load.args else keyword(load, "f")
    if source is None:
        return False
    targets, folders = ctx.remember("security.writes", lambda: _writes(ctx))  # type: ignore[misc]
    if any(_same_path(source, t, ctx) for t in targets):
        return True
    return any(_in_folder(source, d, ctx) for d in folders)


TORCH_SAVE = ("torch.save", "torch.serialization.save")
# Checkpoint writers of training frameworks, by the last part of their name: the arguments naming
# the folder they write into (a keyword, else the first positional argument).
_FOLDER_WRITERS = {"ModelCheckpoint": ("dirname", "dirpath"), "DiskSaver": ("dirname",)}


def _writes(ctx: FileContext) -> tuple[list[ast.AST], list[ast.AST]]:
    """The paths ``torch.save`` writes in this file, and the folders its checkpoint writers write to."""
    targets: list[ast.AST] = []
    folders: list[ast.AST] = []
    for call in ctx.by_type.get(ast.Call, []):
        assert isinstance(call, ast.Call)
        if ctx.call_name(call) in TORCH_SAVE:
            target = call.args[1] if len(call.args) >= 2 else keyword(call, "f")
            if target is not None:
                targets.append(target)
                targets.extend(v.args[0] for o, v in (ctx.bindings(target) if isinstance(target, ast.Name) else [])
                               if isinstance(o, ast.withitem) and isinstance(v, ast.Call) and v.args)
            continue
        func = call.func
        last = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if last in _FOLDER_WRITERS:
            folder = next((k.value for k in call.keywords if k.arg in _FOLDER_WRITERS[last]),
                          call.args[0] if call.args else None)
            if folder is not None:
                folders.append(folder)
    return targets, folders


def _same_path(a: ast.AST, b: ast.AST, ctx: FileContext) -> bool:
    """``a`` and ``b`` name the same file: equal string values, or the same expression whose names are
    bound by the same definitions (``self`` within one class)."""
    text_a, text_b = _text(a, ctx), _text(b, ctx)
    if text_a is not None and text_b is not None:
        return os.path.normpath(text_a) == os.path.normpath(text_b)
    if ast.dump(a) != ast.dump(b):
        return False
    for x, y in zip(ast.walk(a), ast.walk(b), strict=True):  # equal dumps: the same shape
        if isinstance(x, ast.Name) and isinstance(y, ast.Name):
            if x.id == "self":
                if ctx.enclosing_class(x) is not ctx.enclosing_class(y):
                    return False
            elif {id(o) for o, _ in ctx.bindings(x)} != {id(o) for o, _ in ctx.bindings(y)}:
                return False
            elif not ctx.bindings(x) and ctx.scope(x) is not ctx.scope(y):
                return False
    return True


def _in_folder(path: ast.AST, folder: ast.AST, ctx: FileContext) -> bool:
    """``path`` names a file inside ``folder``: the folder's string is its prefix, or the folder's own
    expression is part of it."""
    text, where = _text(path, ctx), _text(folder, ctx)
    if text is not None and where is not None:
        return os.path.normpath(text).startswith(os.path.normpath(where).rstrip("/") + "/")
    return any(_same_path(part, folder, ctx) for part in ast.walk(path)
               if isinstance(part, (ast.Name, ast.Attribute, ast.Constant)))


def _text(expr: ast.AST, ctx: FileContext) -> str | None:
    """The string ``expr`` always holds: a literal, or a name whose every definition is the same literal."""
    if isinstance(expr, ast.Constant):
        return expr.value if isinstance(expr.value, str) else None
    if isinstance(expr, ast.Name):
        values = {v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else None
                  for _, v in ctx.bindings(expr)}
        if len(values) == 1:
            return values.pop()
    return None


@follows_definitions(False)
def _fetched(expr: ast.AST, ctx: FileContext, depth: int) -> bool:
    if depth < 0:
        return False
    for node in ast.walk(expr):
        if isinstance(node, ast.Call) and _is_download(node, ctx):
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(_URL):
            return True
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            for _, value in ctx.bindings(node):
                if isinstance(value, _Unpacked):  # ``path, _ = urlretrieve(url)``
                    value = value.value
                if value is not None and _fetched(value, ctx, depth - 1):
                    return True
    return False


def _is_download(call: ast.Call, ctx: FileContext) -> bool:
    qn = ctx.call_name(call)
    if qn in _HTTP_GETS:
        return True
    func = call.func
    last = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return last in DOWNLOADERS
