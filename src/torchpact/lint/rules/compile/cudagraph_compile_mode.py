from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import MODULE, FileContext, is_const, keyword
from torchpact.lint.rule import Hit, Invalid, Rule

_CUDAGRAPH_MODES = {"reduce-overhead", "max-autotune"}


class CudagraphCompileMode(Rule):
    """`torch.compile(mode="reduce-overhead" | "max-autotune")` turns on CUDA graphs.

    ## What it does
    Flags `torch.compile(...)` and `module.compile(...)` with `mode="reduce-overhead"` or
    `mode="max-autotune"`, and `options={"triton.cudagraphs": True}`. Advice only: CUDA graphs are
    often what these modes are chosen for; `"max-autotune-no-cudagraphs"` and the default mode are
    not flagged. `x.compile(...)` is `nn.Module.compile` (which calls `torch.compile` on the module)
    only when `x` is known to be a module; another object's `compile` method (a project's trainer,
    another framework's model) is not flagged.

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
    def prepare(self, engine):
        engine.compile(mode="max-autotune")
        self.runner.compile(mode="reduce-overhead")
""",
    ]
    invalid = [
        """
import torch

model = torch.compile(model, mode="reduce-overhead")
""",
        Invalid("""
import torch as th

class Trainer:
    def setup(self):
        self.model.compile(mode="max-autotune", fullgraph=True)
        self.head = th.compile(self.head, options={"triton.cudagraphs": True})
""", count=2),
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
            message = (f'mode="{mode.value}" turns on CUDA graphs (triton.cudagraphs=True): each new input '
                       "shape records another graph, and outputs kept across calls are overwritten by the next run")
            yield self.hit(node, message=message)
            return
        options = keyword(node, "options")
        if isinstance(options, ast.Dict):
            for k, v in zip(options.keys, options.values):
                if is_const(k, "triton.cudagraphs") and is_const(v, True):
                    yield self.hit(node)
                    return
