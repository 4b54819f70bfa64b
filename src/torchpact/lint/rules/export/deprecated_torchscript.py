from __future__ import annotations

import ast

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext
from torchpact.lint.rule import Invalid
from torchpact.lint.rules._api import ApiUse

# torch.jit functions that take a scripted module and give back one (still the artifact).
_JIT_PASSES = {"torch.jit.freeze", "torch.jit.optimize_for_inference", "torch.jit.script", "torch.jit.trace"}
_SAVES = {"torch.jit.save"}


class DeprecatedTorchscript(ApiUse):
    """`torch.jit.script` / `torch.jit.trace` is used for speed; TorchScript is deprecated on torch 2.13.

    ## What it does
    Flags calls of `torch.jit.script`, `torch.jit.trace` and `torch.jit.trace_module` (and
    `@torch.jit.script` on a function) where scripting serves the program itself: a decorated
    helper, a scripted callable stored (`self.fn = torch.jit.script(fn)`) and called. Info only:
    existing TorchScript deployments keep working.

    Not flagged: a call whose scripted result is the function's product — saved as its output
    (`scripted.save(path)`, `torch.jit.save(scripted, path)`), or made from what the caller hands
    over (a parameter, `self`) and returned to it (`return torch.jit.trace_module(self, ...)` in a
    `to_script_module()` method, `return torch.jit.script(m)`), also after `torch.jit.freeze` /
    `optimize_for_inference`. There the TorchScript artifact is what the API promises (an export
    format the user selects), and no replacement exists without changing that API. A factory that
    returns a scripted module it builds itself (`return torch.jit.script(Cell(n))`), and a function
    used as a decorator in the same file (`@maybe_script`), still script for speed, and are flagged.

    Nor a call in test code: a test module (`test_*.py`, `*_test.py`, `conftest.py`, a `tests/`
    folder) or a function pytest or unittest collects as a test (`test*`, at module level or in a
    `Test*` / `TestCase` class), nested definitions and helpers of a test module included. A test
    needs no speed: there a script or trace checks that the library's code stays scriptable or
    traceable for its users (`assert_close(torch.jit.script(m)(x), m(x))`, a `trace=True`
    parametrisation), and no other call tests that. The same call in a library module or a script
    is flagged.

    Nor a call torch 2.13 never makes: under a branch a `torch.__version__` test excludes there
    (`if tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 9):`, `packaging.version`
    comparisons, names bound to either), or inside a `warnings.catch_warnings()` block that ignores
    the DeprecationWarning before the call (deliberate, as for TP413).

    ## Why is this bad?
    On torch 2.13 each call emits `DeprecationWarning: torch.jit.script is deprecated. Please switch
    to torch.compile or torch.export.` TorchScript gets no new features, and the newer exporters
    (`torch.export`, the dynamo ONNX exporter) do not take a scripted module (see TP704).

    ## Fix safety
    No autofix: `torch.export.export(model, args)` is the replacement for deployment and
    `torch.compile(model)` for speed; both need the model's inputs and may surface graph breaks.
    """

    code = "TP755"  # shared with export-check's finding of the same pattern (audit/export.py)
    category = Category.EXPORT
    severity = Severity.INFO
    message = "TorchScript (`torch.jit.script` / `trace`) is deprecated on torch 2.13"
    fix_hint = "use `torch.export.export(model, args)` for deployment or `torch.compile(model)` for speed"
    triggers = ("jit",)
    names = dict.fromkeys(("torch.jit.script", "torch.jit.trace", "torch.jit.trace_module"))
    warning_category = "DeprecationWarning"

    def warned_text(self, qn: str) -> str | None:
        return f"`{qn}` is deprecated"  # torch 2.13's text (trace_module warns as trace_method)

    valid = ["""
import torch
ep = torch.export.export(model, (x,))
fast = torch.compile(model)
@torch.jit.ignore
def helper(x):
    return x
""", """
import torch

class Estimator(torch.nn.Module):
    def to_script_module(self):
        self.train(False)
        example = torch.randn(2, self.dim)
        result = torch.jit.trace_module(self, {"predict": (example,)}, check_trace=False)
        return result
""", """
import torch

def export(model, example, path, fmt):
    if fmt == "torchscript":
        jitted = torch.jit.trace(model, example, strict=True)
        jitted = torch.jit.freeze(jitted)
        jitted.save(path)
    else:
        torch.onnx.export(model, (example,), path, dynamo=True)
""", """
import torch.jit

def save_scripted(module, out_file):
    torch.jit.save(torch.jit.script(module.eval()), out_file)
""", """
from torch import jit

def as_torchscript(fn, examples):
    return jit.trace(fn, examples)
""", """
import torch

def bundle(encoder, decoder, x):
    enc = torch.jit.script(encoder)
    dec = torch.jit.trace(decoder, (enc(x),))
    return enc, dec
""", """
import torch
from packaging import version

_torch_ver = tuple(int(v) for v in torch.__version__.split(".")[:2])
_old_torch = version.parse(torch.__version__) < version.parse("2.9")

if _torch_ver < (2, 9):
    @torch.jit.script
    def fused(x):
        return x * torch.sigmoid(x)
else:
    def fused(x):
        return x * torch.sigmoid(x)

def speed_up(model, x):
    if not _old_torch:
        fast = torch.compile(model)
    else:
        fast = torch.jit.script(model)
    return fast(x)

def cell(n):
    return torch.jit.script(Cell(n)) if torch.__version__ < "2.9" else Cell(n)

def cell_fast(n):
    return torch.jit.script(Cell(n)) if torch.__version__ < (2, 9) else torch.compile(Cell(n))
""", """
import warnings
import torch

def loop_helper(fn, example):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=DeprecationWarning)
        helper = torch.jit.script(fn)
    return helper(example)

def traced(model, x):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*jit.trace", category=DeprecationWarning)
        fast = torch.jit.trace(model, x)
    return fast(x)
""", """
import pytest
import torch

@pytest.mark.parametrize("size", [8, 16])
def test_pool_scripts(size):
    pool = AvgPool(size).eval()
    x = torch.randn(2, size)
    torch.testing.assert_close(torch.jit.script(pool)(x), pool(x))

def test_trainer_on_traced_model():
    for traced in (False, True):
        model = Net()
        if traced:
            model = torch.jit.trace(model, torch.randn(1, 4))
        run_one_epoch(model)
""", """
import unittest
from torch import jit

class OneHotCase(unittest.TestCase):
    def test_scripted_one_hot(self):
        class Wrapper(Module):
            def forward(self, x):
                return one_hot(x, 4)
        scripted = jit.script(Wrapper())
        self.assertTrue(scripted(idx).equal(Wrapper()(idx)))

class TestExport:
    def test_trace_module(self, model, example):
        mod = jit.trace_module(model, inputs={"forward": example})
        assert mod.code
"""]
    invalid = [Invalid("""
import torch
scripted = torch.jit.script(model)
traced = torch.jit.trace(model, example)
""", count=2), """
import torch

@torch.jit.script
def fused_gelu(x):
    return x * 0.5 * (1.0 + torch.erf(x / 1.41421))
""", """
import torch

class Diarizer(torch.nn.Module):
    def __init__(self, helper):
        super().__init__()
        self.concat = torch.jit.script(helper)

    def forward(self, a, b):
        return self.concat(a, b)
""", """
import torch

def maybe_script(fn):
    return torch.jit.script(fn)

@maybe_script
def smooth(x, k: int):
    return x.cumsum(0) / k
""", """
import torch

def make_cell(n, layers):
    return torch.jit.script(LayerNormLSTM(n, layers))
""", """
import torch

def run(model, batches):
    fast = torch.jit.trace(model, batches[0])
    outs = [fast(b) for b in batches]
    return outs
""", Invalid("""
import warnings
import torch
from packaging.version import Version

TORCH_MAJOR_MINOR = tuple(map(int, torch.__version__.split(".")[:2]))

if TORCH_MAJOR_MINOR >= (2, 0):
    @torch.jit.script
    def swish(x):
        return x * torch.sigmoid(x)

def speed_up(model, x):
    if Version(torch.__version__) < Version("2.9"):
        fast = torch.compile(model)
    else:
        fast = torch.jit.script(model)
    return fast(x)

def quiet(fn, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)
        sfn = torch.jit.script(fn)
    return sfn(x)

def unknown(fn, x, flag):
    if flag < (2, 9):
        fn = torch.jit.script(fn)
    return fn(x)
""", count=4), Invalid("""
import torch

def attest_speed(model, x):
    fast = torch.jit.trace(model, x)
    return fast(x)

class Helper:
    def test_mode(self, fn):
        fn = torch.jit.script(fn)
        return fn(1)

def run():
    def test_inner(fn):
        return torch.jit.script(fn)(1)
    return test_inner
""", count=3)]

    def applies(self, node: ast.Attribute, ctx: FileContext) -> bool:
        if ctx.in_test(node):
            return False  # scriptability is what a test checks
        call = ctx.parent(node)
        if not (isinstance(call, ast.Call) and call.func is node):
            return True
        return not _is_functions_product(call, ctx)


def _is_functions_product(call: ast.Call, ctx: FileContext) -> bool:
    """Whether what ``call`` scripts is saved, or is the caller's own object returned to it, through
    the names it is bound to (and jit passes such as ``freeze`` over them)."""
    fn = ctx.enclosing_function(call)
    if fn is not None and _used_as_decorator(fn.name, ctx):
        return False
    converts_callers = fn is not None and _callers_object(call, fn)
    artifacts: set[str] = set()
    found = _produced(call, artifacts, ctx)
    if found == "saved" or (found == "returned" and converts_callers):
        return True
    if not artifacts:
        return False
    scope = ctx.scope(call)
    body = scope.body if isinstance(getattr(scope, "body", None), list) else [scope]
    changed = True
    while changed:  # names bound to jit passes over an artifact are artifacts too
        changed = False
        for node in ctx.walk_scope(body):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and _jit_pass_over(node.value, artifacts, ctx)):
                for t in node.targets:
                    if isinstance(t, ast.Name) and t.id not in artifacts:
                        artifacts.add(t.id)
                        changed = True
    for node in ctx.walk_scope(body):
        if isinstance(node, ast.Name) and node.id in artifacts and isinstance(node.ctx, ast.Load):
            found = _produced(node, set(), ctx)
            if found == "saved" or (found == "returned" and converts_callers):
                return True
    return False


def _callers_object(call: ast.Call, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """The scripted object is a parameter of ``fn`` or ``self`` (``self.eval()``, ``model.visual``)."""
    target = call.args[0] if call.args else None
    while isinstance(target, (ast.Attribute, ast.Call, ast.Subscript)):
        target = target.func if isinstance(target, ast.Call) else target.value
    params = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
    return isinstance(target, ast.Name) and target.id in params


def _produced(expr: ast.AST, names: set[str], ctx: FileContext) -> str | None:
    """"returned" / "saved" when ``expr`` (the scripted value) is returned, yielded or saved where it
    stands; the names it is bound to are added to ``names``."""
    parent = ctx.parent(expr)
    while isinstance(parent, ast.Tuple) or (isinstance(parent, ast.Call) and _is_jit_pass(parent, ctx)
                                            and expr in parent.args):
        expr, parent = parent, ctx.parent(parent)
    if isinstance(parent, (ast.Return, ast.Yield, ast.YieldFrom)):
        return "returned"
    if isinstance(parent, ast.Attribute) and parent.attr == "save":
        return "saved"
    if isinstance(parent, ast.Call) and expr in parent.args and ctx.call_name(parent) in _SAVES:
        return "saved"
    if isinstance(parent, ast.Assign):
        names.update(t.id for t in parent.targets if isinstance(t, ast.Name))
    return None


def _is_jit_pass(call: ast.Call, ctx: FileContext) -> bool:
    return ctx.call_name(call) in _JIT_PASSES


def _jit_pass_over(call: ast.Call, artifacts: set[str], ctx: FileContext) -> bool:
    return _is_jit_pass(call, ctx) and any(isinstance(a, ast.Name) and a.id in artifacts for a in call.args)


def _used_as_decorator(name: str, ctx: FileContext) -> bool:
    for node in ctx.nodes(ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
        for d in node.decorator_list:
            target = d.func if isinstance(d, ast.Call) else d
            if isinstance(target, ast.Name) and target.id == name:
                return True
    return False
