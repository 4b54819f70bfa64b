"""Where the file a ``torch.load`` reads comes from, for the security rules (TP951, TP952).

A file the same code has just written is safe by construction (``round_trip``, in
``load_with_full_pickle``). A file fetched from the network is untrusted input wherever the load
sits, a test module included: the load's source is downloaded when it is (or is a name bound to) the
result of a download call (``hf_hub_download``, ``cached_path``, ``urlretrieve``, ``urlopen``,
``requests.get(...).content``, ``wget.download``...), contains a URL literal, or is the destination
an earlier download call of the same function wrote (``torch.hub.download_url_to_file(url, dst)``).
"""

from __future__ import annotations

import ast

from torchpact.lint.context import FileContext, keyword
from torchpact.lint.dataflow import _Unpacked

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
