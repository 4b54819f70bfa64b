"""Whether a model's forward depends on its mode (``module.training``), for TP402.

``Module.eval()`` / ``train(False)`` only set ``training = False`` on every submodule; what a model
computes changes only where some forward reads ``self.training``. In torch 2.13 those are the
modules of ``MODE_DEPENDENT`` (the Dropout family, BatchNorm and InstanceNorm with running
statistics, RReLU, recurrent layers with ``dropout > 0``, MultiheadAttention and the Transformer
layers); every other ``torch.nn`` module computes the same in both modes
(``tests/proofs/test_training.py`` checks the set against torch's sources). A class of this file is
mode-dependent when it reads ``.training`` itself or builds a mode-dependent module, and known to be
mode-free when everything it builds or is handed is resolved and mode-free. Anything else
(a model from a parameter, a factory of another package) is unknown.
"""

from __future__ import annotations

import ast

from torchpact.lint.context import FileContext, is_const, keyword
from torchpact.lint.analysis.following import follows_definitions

DEPENDENT, FREE, UNKNOWN = "dependent", "free", "unknown"

_DROPOUTS = {"Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"}
_BATCHNORMS = {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "LazyBatchNorm1d",
               "LazyBatchNorm2d", "LazyBatchNorm3d"}
_INSTANCENORMS = {"InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "LazyInstanceNorm1d",
                  "LazyInstanceNorm2d", "LazyInstanceNorm3d"}
_RNNS = {"RNN", "LSTM", "GRU"}
_ALWAYS = {"RReLU", "MultiheadAttention", "Transformer", "TransformerEncoder", "TransformerDecoder",
           "TransformerEncoderLayer", "TransformerDecoderLayer"}
# The torch.nn classes whose forward (or a submodule they always build) reads ``self.training``.
MODE_DEPENDENT = frozenset(_DROPOUTS | _BATCHNORMS | _INSTANCENORMS | _RNNS | _ALWAYS)
# Loaders whose result is a whole module built elsewhere.
_MODULE_LOADERS = ("torch.load", "torch.hub.", "torch.jit.", "torch.export.", "torch.compile",
                   "torch.fx.", "torch.package.", "torch.serialization.")
# Calls that build no module (and run none of the model's code).
_PLAIN_ROOTS = ("math.", "numpy.", "builtins.", "typing.", "warnings.", "collections.", "itertools.",
                "functools.", "operator.", "logging.", "copy.", "os.", "einops.")
_PLAIN_BUILTINS = {"super", "range", "len", "int", "float", "str", "bool", "list", "tuple", "dict", "set",
                   "enumerate", "zip", "min", "max", "sum", "abs", "round", "print", "isinstance", "hasattr",
                   "sorted", "reversed", "map", "any", "all", "repr", "format", "iter", "next", "divmod", "pow"}
_RETURNS_SELF = {"to", "cuda", "cpu", "float", "double", "half", "bfloat16", "train", "requires_grad_",
                 "type", "share_memory"}
# nn.Module's own API, which a subclass may read on ``self`` without binding it.
_MODULE_API = {"parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children",
               "modules", "named_modules", "register_buffer", "register_parameter", "add_module",
               "register_module", "apply", "to", "cuda", "cpu", "float", "double", "half", "bfloat16",
               "state_dict", "load_state_dict", "zero_grad", "requires_grad_", "get_submodule",
               "get_parameter", "get_buffer", "__class__", "__init__", "extra_repr", "_get_name"}
_CONTAINERS = {"Sequential", "ModuleList", "ModuleDict"}
_DEPTH = 8


def layer_mode(name: str, call: ast.Call) -> str:
    """Whether ``torch.nn.<name>(...)`` built by ``call`` computes differently in eval mode."""
    if name in _DROPOUTS:
        p = call.args[0] if call.args else keyword(call, "p")
        return FREE if p is not None and isinstance(p, ast.Constant) and p.value in (0, 0.0) else DEPENDENT
    if name in _BATCHNORMS:
        track = keyword(call, "track_running_stats")
        return FREE if track is not None and is_const(track, False) else DEPENDENT
    if name in _INSTANCENORMS:
        track = keyword(call, "track_running_stats")  # defaults to False: instance statistics in both modes
        return FREE if track is None or is_const(track, False) else DEPENDENT
    if name in _RNNS:
        dropout = keyword(call, "dropout")
        if dropout is None and len(call.args) > 5:
            dropout = call.args[5]
        if dropout is None or (isinstance(dropout, ast.Constant) and dropout.value in (0, 0.0)):
            return FREE
        return DEPENDENT
    return DEPENDENT if name in _ALWAYS else FREE


def join(modes: list[str]) -> str:
    if DEPENDENT in modes:
        return DEPENDENT
    return UNKNOWN if UNKNOWN in modes else FREE


class ModeDependence:
    """Answers for one file: the mode-dependence of a model value (an expression) or a local class."""

    def __init__(self, ctx: FileContext):
        self.ctx = ctx
        self._classes: dict[str, str] = {}
        self._functions: dict[int, str] = {}

    # values -------------------------------------------------------------------------------------
    @follows_definitions(UNKNOWN)
    def of_expr(self, expr: ast.AST, depth: int = _DEPTH) -> str:
        """What the module ``expr`` evaluates to is: built here and mode-(in)dependent, or unknown."""
        ctx = self.ctx
        if depth <= 0:
            return UNKNOWN
        while (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)
               and expr.func.attr in _RETURNS_SELF and ctx.resolve(expr.func) is None):
            expr = expr.func.value
        if isinstance(expr, (ast.Name, ast.Attribute)):
            binds = ctx.bindings(expr)
            if not binds:
                return UNKNOWN
            return join([self._binding(owner, value, expr, depth - 1) for owner, value in binds])
        if isinstance(expr, ast.Call):
            return self._call(expr, depth)
        if isinstance(expr, ast.IfExp):
            return join([self.of_expr(expr.body, depth - 1), self.of_expr(expr.orelse, depth - 1)])
        return UNKNOWN

    def _binding(self, owner: ast.AST, value: ast.AST | None, read: ast.AST, depth: int) -> str:
        if value is None or isinstance(owner, (ast.arg, ast.For, ast.AsyncFor, ast.comprehension, ast.withitem)):
            return UNKNOWN  # a parameter, a loop variable, a context manager
        if isinstance(value, ast.expr):
            return self.of_expr(value, depth)
        inner = getattr(value, "value", None)  # ``a, model = make()``: unpacked from a call
        if isinstance(owner, ast.Assign) and isinstance(inner, ast.Call) and isinstance(read, ast.Name):
            index = _position(owner, read.id)
            if index is not None:
                return join([_item(r, index, self, depth) for r in self._returns(inner)] or [UNKNOWN])
        return UNKNOWN

    def _returns(self, call: ast.Call) -> list[ast.AST]:
        if not isinstance(call.func, ast.Name):
            return []
        out: list[ast.AST] = []
        for fn in self.ctx.functions.get(call.func.id, []):
            out.extend(n.value for n in self.ctx.walk_scope(fn.body) if isinstance(n, ast.Return) and n.value)
        return out

    def _call(self, call: ast.Call, depth: int) -> str:
        ctx = self.ctx
        func = call.func
        if isinstance(func, ast.Name) and func.id in ctx.module_classes:
            return self.of_class(ctx.module_classes[func.id], depth - 1)
        qn = ctx.call_name(call) or ""
        if qn == "copy.deepcopy" and call.args:
            return self.of_expr(call.args[0], depth - 1)
        if qn.startswith("torch.nn.") and not qn.startswith(("torch.nn.functional.", "torch.nn.init.")):
            name = qn.rsplit(".", 1)[-1]
            # a container holds what it is given; a layer's arguments are sizes and flags, except a
            # module built in place (``nn.TransformerEncoder(nn.TransformerEncoderLayer(...))``)
            held = (_arguments(call) if name in _CONTAINERS else
                    [a for a in _arguments(call) if isinstance(a, ast.Call)])
            return join([layer_mode(name, call), *(self._value(a, depth - 1) for a in held)])
        if isinstance(func, ast.Name) and func.id in ctx.functions:
            returns = self._returns(call)
            return join([self.of_expr(r, depth - 1) for r in returns] or [UNKNOWN])
        return UNKNOWN

    @follows_definitions(UNKNOWN)
    def _value(self, expr: ast.AST, depth: int) -> str:
        """A value a module is built from or stores: plain data is mode-free, a module is asked about."""
        if depth <= 0:
            return UNKNOWN
        if isinstance(expr, ast.Constant):
            return FREE
        if isinstance(expr, ast.Starred):
            return self._value(expr.value, depth)
        if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
            return join([self._value(e, depth) for e in expr.elts])
        if isinstance(expr, ast.Dict):
            return join([self._value(e, depth) for e in expr.values if e is not None])
        if isinstance(expr, (ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.JoinedStr)):
            return FREE  # arithmetic and text: numbers and strings, not modules
        if isinstance(expr, (ast.GeneratorExp, ast.ListComp)):
            return self._value(expr.elt, depth - 1)
        if isinstance(expr, ast.Call):
            qn = self.ctx.call_name(expr) or ""
            if qn.startswith(_MODULE_LOADERS):
                return UNKNOWN
            if qn.startswith("torch.nn.") or (isinstance(expr.func, ast.Name) and (
                    expr.func.id in self.ctx.module_classes or expr.func.id in self.ctx.functions)):
                return self._call(expr, depth)
            if qn.startswith("torch.") or qn.startswith(_PLAIN_ROOTS) or (
                    isinstance(expr.func, ast.Name) and expr.func.id in _PLAIN_BUILTINS):
                return FREE  # tensors, numbers
            return UNKNOWN
        if isinstance(expr, ast.Name):
            binds = self.ctx.bindings(expr)
            if not binds:
                return UNKNOWN
            modes = []
            for owner, value in binds:
                if isinstance(owner, ast.arg):
                    modes.append(FREE if _constant_default(owner, self.ctx) else UNKNOWN)
                elif isinstance(value, ast.expr):
                    modes.append(self._value(value, depth - 1))
                else:
                    modes.append(UNKNOWN)
            return join(modes)
        return UNKNOWN

    # classes ------------------------------------------------------------------------------------
    def of_class(self, cls: ast.ClassDef, depth: int = _DEPTH) -> str:
        """A class of this file: DEPENDENT when it reads ``.training`` or builds a mode-dependent module,
        FREE when all it builds and stores is resolved and mode-free, else UNKNOWN. Answered once per
        class, from its own definition (``depth`` is the caller's and not used)."""
        known = self._classes.get(cls.name)
        if known is not None:
            return known
        self._classes[cls.name] = UNKNOWN  # while in progress (a recursive model)
        found = self._class(cls, _DEPTH)
        self._classes[cls.name] = found
        return found

    def _class(self, cls: ast.ClassDef, depth: int) -> str:
        methods = {s.name for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute) and node.attr == "training" and isinstance(node.ctx, ast.Load):
                return DEPENDENT
        if methods & {"train", "eval", "__call__", "_call_impl"}:
            return UNKNOWN  # a mode of its own
        modes = [self._base(cls, base, depth) for base in cls.bases]
        for node in ast.walk(cls):
            if isinstance(node, ast.Call):
                modes.append(self._built(node, depth))
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                       for t in targets):
                    modes.append(self._value(node.value, depth - 1))
            if modes and modes[-1] == DEPENDENT:
                return DEPENDENT
        return join(modes)

    def _base(self, cls: ast.ClassDef, base: ast.expr, depth: int) -> str:
        ctx = self.ctx
        if isinstance(base, ast.Name) and base.id in ctx.module_classes:
            return self.of_class(ctx.module_classes[base.id], depth - 1)
        qn = ctx.resolve(base) or ""
        if qn in ("torch.nn.Module", "torch.nn.modules.module.Module"):
            return FREE
        if qn.startswith("torch.nn."):
            return DEPENDENT if qn.rsplit(".", 1)[-1] in MODE_DEPENDENT else FREE
        if isinstance(base, ast.Name) and base.id in ("object", "ABC", "Generic"):
            return FREE
        # A base this file does not show. nn.Module.__init__ does not call the next class's __init__, so
        # a base listed after nn.Module never builds anything; its methods run only if this class reads
        # a name on ``self`` that it does not bind itself.
        index = cls.bases.index(base)
        after_module = any((ctx.resolve(b) or "") in ("torch.nn.Module", "torch.nn.modules.module.Module")
                           for b in cls.bases[:index])
        return FREE if after_module and _binds_all_it_reads(cls) else UNKNOWN

    def _built(self, call: ast.Call, depth: int) -> str:
        """A call inside a class: a module it builds, or code it runs that may build one."""
        ctx = self.ctx
        func = call.func
        qn = ctx.call_name(call) or ""
        if qn.startswith(_MODULE_LOADERS):
            return UNKNOWN
        if qn.startswith("torch.nn.") and not qn.startswith(("torch.nn.functional.", "torch.nn.init.")):
            return layer_mode(qn.rsplit(".", 1)[-1], call)
        if qn.startswith("torch.") or qn.startswith(_PLAIN_ROOTS):
            return FREE
        if isinstance(func, ast.Name):
            if func.id in ctx.module_classes:
                return self.of_class(ctx.module_classes[func.id], depth - 1)
            if func.id in _PLAIN_BUILTINS:
                return FREE
            if func.id in ctx.functions:
                return self._function(func.id, depth - 1)
            return UNKNOWN
        if isinstance(func, ast.Attribute) and ctx.resolve(func) is None:
            return FREE  # a method of a value built here (``layers.append``, ``x.view``)
        return UNKNOWN

    def _function(self, name: str, depth: int) -> str:
        modes = []
        for fn in self.ctx.functions.get(name, []):
            key = id(fn)
            if key not in self._functions:
                self._functions[key] = UNKNOWN
                self._functions[key] = join([self._built(n, _DEPTH) for n in ast.walk(fn)
                                             if isinstance(n, ast.Call)] or [FREE])
            modes.append(self._functions[key])
        return join(modes or [UNKNOWN])


def _arguments(call: ast.Call) -> list[ast.expr]:
    return [*call.args, *(k.value for k in call.keywords)]


def _position(assign: ast.Assign, name: str) -> int | None:
    for target in assign.targets:
        if isinstance(target, (ast.Tuple, ast.List)):
            for i, elt in enumerate(target.elts):
                if isinstance(elt, ast.Name) and elt.id == name:
                    return i
    return None


def _item(returned: ast.AST, index: int, dep: ModeDependence, depth: int) -> str:
    if isinstance(returned, (ast.Tuple, ast.List)) and index < len(returned.elts):
        return dep.of_expr(returned.elts[index], depth - 1)
    return UNKNOWN


def _constant_default(arg: ast.arg, ctx: FileContext) -> bool:
    """A parameter whose default is plain data (``hidden=28 * 28``): a number or text, not a module."""
    fn = ctx.parent(arg)
    if isinstance(fn, ast.arguments):
        fn_args = fn
    else:
        return False
    if arg.annotation is not None and isinstance(arg.annotation, ast.Name) and arg.annotation.id in (
            "int", "float", "bool", "str"):
        return True
    positional = [*fn_args.posonlyargs, *fn_args.args]
    if arg in positional:
        offset = len(positional) - len(fn_args.defaults)
        i = positional.index(arg)
        default = fn_args.defaults[i - offset] if i >= offset else None
    elif arg in fn_args.kwonlyargs:
        default = fn_args.kw_defaults[fn_args.kwonlyargs.index(arg)]
    else:
        default = None
    return default is not None and all(isinstance(n, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator,
                                                      ast.unaryop, ast.Tuple, ast.Load))
                                       for n in ast.walk(default))


def _binds_all_it_reads(cls: ast.ClassDef) -> bool:
    """Every ``self.<name>`` the class reads is bound by the class itself or is nn.Module's own API."""
    bound = {s.name for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    bound |= {t.id for s in cls.body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)}
    reads = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            (bound if isinstance(node.ctx, ast.Store) else reads).add(node.attr)
    return reads <= bound | _MODULE_API
