from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import MODULE, FileContext, is_const, keyword
from torchpact.lint.rule import Hit, Rule
from torchpact.lint.rules.compile._cudagraph_hazards import compiled_calls, kept_output, varying_shape

_CUDAGRAPH_MODES = {"reduce-overhead", "max-autotune"}


class CudagraphCompileMode(Rule):
    """`torch.compile(mode="reduce-overhead" | "max-autotune")` records CUDA graphs where the code varies input
    shapes or keeps outputs.

    ## What it does
    Flags `torch.compile(...)` and `module.compile(...)` with `mode="reduce-overhead"` or
    `mode="max-autotune"`, or `options={"triton.cudagraphs": True}`, when the calls of what it
    compiles (the name or `self` attribute it is assigned to, the function it decorates, the module
    compiled in place) show one of the two hazards of CUDA graphs: an input whose shape varies
    between calls (the call sits in a loop, and its input is made with a size taken from the loop's
    variable: `torch.randn(n, d)`, `x.view(n, -1)`, `tokens[:, :t]`), or an output that outlives the
    next call without a copy (the output, or a view of it — an index, a field, `.detach()` — appended
    to a list or stored on an object inside the loop that calls again, or bound to a name read after
    a later call). CUDA graphs are what these modes are chosen for: with a fixed shape and outputs
    used before the next call (or `.clone()`d) there is nothing to report, nor where the calls are
    not visible (the compiled function is returned or handed to other code).
    `"max-autotune-no-cudagraphs"` and the default mode are never flagged. `x.compile(...)` is
    `nn.Module.compile` (which calls `torch.compile` on the module) only when `x` is known to be a
    module; another object's `compile` method (a project's trainer, another framework's model) is
    not flagged.

    ## Why is this bad?
    On torch 2.13 both modes set `triton.cudagraphs=True` (`torch._inductor.list_mode_options`;
    the default mode sets nothing), so on CUDA the compiled code is replayed from recorded CUDA
    graphs, with two consequences the default mode does not have. Every distinct input shape records
    and keeps another graph with its own memory pool — past 8 sizes inductor warns `CUDAGraph
    supports dynamic shapes by recording a new graph for each distinct input size. Recording too
    many CUDAGraphs may lead to extra overhead` — so variable batch or sequence lengths cost
    re-recording and memory. And outputs live in the graph's static memory: an output kept across
    calls is overwritten by the next run, and reading it raises `Error: accessing tensor output of
    CUDAGraphs that has been overwritten by a subsequent run` unless it was cloned (or
    `torch.compiler.cudagraph_mark_step_begin()` is called between iterations).

    ## Fix safety
    No autofix. Keep input shapes to a few sizes (pad or bucket), `.clone()` outputs that outlive
    the next call, or use `mode="max-autotune-no-cudagraphs"` / the default mode.
    """

    code = "TP802"
    category = Category.COMPILE
    severity = Severity.INFO
    requires = (
        "the call compiles with a CUDA-graph mode (`reduce-overhead`, `max-autotune`, `triton.cudagraphs`)",
    )
    facts = ("default-mode-uses-cuda-graphs",)
    message = ("this torch.compile mode records CUDA graphs: each new input shape records another graph, "
               "and outputs kept across calls are overwritten by the next run")
    fix_hint = ("keep input shapes fixed (pad/bucket) and clone outputs you keep, or use "
                "mode='max-autotune-no-cudagraphs' / the default mode")
    proof = ("needs CUDA: re-recording per input shape and overwritten outputs only happen on a GPU; "
             "tests/proofs/test_compile.py proves on CPU that these modes switch on triton.cudagraphs")
    nodes = (ast.Call,)
    calls = frozenset({"compile"})
    triggers = ("reduce-overhead", "max-autotune", "cudagraphs")

    valid = [
        """
import torch

fast = torch.compile(model, mode="max-autotune-no-cudagraphs")
default = torch.compile(model)
""",
        """
import torch

def build(model, mode):
    return torch.compile(model, mode=mode)           # chosen by the caller
opts = torch.compile(model, options={"triton.cudagraphs": False, "max_autotune": True})
""",
        """
import torch

class Pipeline:
    def prepare(self, engine, batches, sizes):
        engine.compile(mode="max-autotune")
        outs = []
        for b in batches:
            outs.append(engine(b))
        self.runner.compile(mode="reduce-overhead")
        for n in sizes:
            self.runner(torch.randn(n, 16))
        return outs
""",
        """
import torch

def bench(layer, x, steps):
    step = torch.compile(layer, mode="reduce-overhead", fullgraph=True)
    kept = []
    for _ in range(steps):
        kept.append(step(x).clone())
    return torch.stack(kept)
""",
        """
import torch

def make_step(fn):
    return torch.compile(fn, mode="reduce-overhead")
""",
        """
import torch

class Encoder:
    def __init__(self, net):
        self.run = torch.compile(net, mode="max-autotune", dynamic=False)

    def embed_all(self, images):
        feats = []
        for img in images:
            feats.append(self.run(img).cpu())
        return feats
""",
        """
import torch

@torch.compile(mode="reduce-overhead")
def score(a, b):
    return (a * b).sum(-1)

def evaluate(pairs):
    total = 0.0
    for a, b in pairs:
        total += score(a, b).mean().item()
    return total
""",
        """
import torch

def same_twice(f_eager, x):
    f = torch.compile(f_eager, mode="reduce-overhead")
    first = f(x).clone()
    second = f(x)
    return torch.equal(first, second)
""",
        """
import torch

model.compile(mode="max-autotune")
for batch in loader:
    loss = model(batch).logsumexp(-1).mean()
    print(loss.item())
""",
    ]
    invalid = [
        """
import torch

fast = torch.compile(model, mode="reduce-overhead")
for n in (1, 8, 64):
    y = fast(torch.randn(n, 512, device="cuda"))
""",
        """
import torch as th

class Trainer:
    def setup(self):
        self.model.compile(mode="max-autotune", fullgraph=True)

    def collect(self, batches):
        outs = []
        for b in batches:
            outs.append(self.model(b))
        return outs
""",
        """
import torch

def check_replay(layer, x):
    f = torch.compile(layer, mode="reduce-overhead")
    r1 = f(x)
    r2 = f(x)
    torch.testing.assert_close(r1, r2)
""",
        """
import torch

def decode(step_fn, tokens, steps):
    step_fn = torch.compile(step_fn, options={"triton.cudagraphs": True})
    for t in range(1, steps):
        logits = step_fn(tokens[:, :t])
        tokens[:, t] = logits[:, -1].argmax(-1)
""",
        """
import torch

class Cache:
    def __init__(self, net):
        self.head = torch.compile(net, mode="max-autotune")
        self.seen = {}

    def update(self, items):
        for key, x in items:
            out = self.head(x)
            self.seen[key] = out.detach()
""",
        """
import torch

@torch.compile(mode="reduce-overhead")
def encode(x):
    return x.relu()

def run(x, sizes):
    for s in sizes:
        chunk = x.view(s, -1)
        encode(chunk)
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        if not isinstance(node, ast.Call):
            return
        qn = ctx.call_name(node)
        if qn != "torch.compile" and not (
                qn is None and isinstance(node.func, ast.Attribute) and node.func.attr == "compile"
                and MODULE in ctx.kinds(node.func.value)
                and (keyword(node, "mode") is not None or keyword(node, "options") is not None)):
            return
        mode = keyword(node, "mode")
        if isinstance(mode, ast.Constant) and mode.value in _CUDAGRAPH_MODES:
            shown = f'mode="{mode.value}"'
        elif _cudagraphs_option(keyword(node, "options")):
            shown = '`"triton.cudagraphs": True`'
        else:
            return
        calls = compiled_calls(node, ctx)
        shape = varying_shape(calls, ctx)
        if shape is not None:
            call, var = shape
            yield self.hit(node, message=(
                f"{shown} records CUDA graphs, and `{_short(ctx, call.func)}` is called with input shapes that vary "
                f"with `{var}` (line {call.lineno}): each new shape records and keeps another graph, "
                f"with its own memory"))
            return
        kept = kept_output(calls, ctx)
        if kept is not None:
            call, where = kept
            at = f"line {call.lineno}"
            if where.lineno != call.lineno:
                at += f", kept on line {where.lineno}"
            yield self.hit(node, message=(
                f"{shown} records CUDA graphs, and the output of `{_short(ctx, call.func)}` ({at}) outlives the next "
                "call without a copy: the next run overwrites it"))


def _cudagraphs_option(options: ast.AST | None) -> bool:
    if isinstance(options, ast.Dict):
        # a dict display has one key per value (None for a ``**`` unpacking)
        return any(is_const(k, "triton.cudagraphs") and is_const(v, True)
                   for k, v in zip(options.keys, options.values, strict=True))
    return False


def _short(ctx: FileContext, node: ast.AST) -> str:
    text = " ".join(ctx.segment(node).split())
    return text if len(text) <= 40 else text[:37] + "..."
