from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import (
    BATCH, GRAD_LEAF, GRAPH, LOSS, MODULE, OUTPUT, TENSOR, FileContext,
)
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.rules._devices import already_placed
from torchpact.lint.rules._tensors import resolved_tensor

# Tensor methods that return a new tensor and leave their receiver unchanged.
PURE = {
    "to", "cuda", "cpu", "float", "half", "double", "bfloat16", "long", "int", "bool",
    "clamp", "clip", "add", "sub", "mul", "div", "pow", "abs", "neg", "exp", "log", "sqrt",
    "detach", "contiguous", "view", "reshape", "squeeze", "unsqueeze", "permute", "transpose", "t",
    "flatten", "clone", "masked_fill", "index_fill", "scatter", "fill_diagonal", "type",
    "normal", "uniform", "zero", "fill", "requires_grad",
}
# Methods nn.Module has too, where they convert the module in place: judged only on a local name.
MODULE_METHODS = {"to", "cuda", "cpu", "float", "half", "double", "bfloat16", "type", "requires_grad", "zero"}
# Names other objects share: modules (in place), numpy arrays (``fill`` in place), runtimes' models.
SHARED = MODULE_METHODS | {"long", "int", "bool", "clip", "reshape", "transpose", "flatten", "squeeze", "view", "fill"}
TENSOR_KINDS = {TENSOR, BATCH, GRAPH, GRAD_LEAF, LOSS, OUTPUT}


class TensorResultDiscarded(Rule):
    """A tensor method that returns a new tensor is called as a statement, so its result is lost.

    ## What it does
    Flags statements like `x.to(device)`, `x.float()`, `x.clamp(0, 1)`, `x.add(1)`,
    `x.unsqueeze(0)` whose result is not assigned, when the call is resolved as `Tensor`'s method.

    The condition it needs: the receiver's kind is resolved. For the names other objects share —
    `to`, `cuda`, `cpu`, `float`, `half`, `double`, `type` (an `nn.Module` converts itself in place),
    `reshape`, `transpose`, `clip`, `fill` (a numpy array; its `fill` works in place), any of them on
    a third-party runtime's model — every definition reaching the receiver must be a tensor: a torch
    tensor function's result (`torch.zeros`, `torch.from_numpy`, `F.relu`), a tensor method or
    operator on one, a parameter annotated `Tensor`, an element unpacked from a `DataLoader`'s batch.
    A module's output, `torch.load`'s result (it may be a whole pickled module), `torch.jit.load`,
    `torch.quantization` results, a whole batch and an unannotated parameter are not resolved and
    not flagged. For names only tensors have (`masked_fill`, `unsqueeze`, `clamp`), a receiver that
    local dataflow types as a tensor (a module's output included) and not as a module suffices.

    A conversion is only lost when it would have converted something: `Tensor.to(device)` returns the
    tensor itself (no copy) when it already has that device, `.to(dtype)` when it already has that
    dtype, `.cuda()` / `.cpu()` likewise. So a discarded `.to(...)` / `.cuda()` / `.cpu()` is not
    reported when every definition reaching the receiver already has the placement asked for: created
    with it (`torch.zeros(n, device=q.device)` then `.to(q.device)`; `dtype=q.dtype` then
    `.to(q.dtype)`; `torch.zeros_like(q)`; an earlier `.cuda()`), or — for the device — computed by
    torch operators and elementwise/reduction functions from such tensors (or from `k` itself when the
    target is `k.device`) and from values that hold no tensor (Python numbers, numpy scalars, sizes):
    such an operation returns its result on that device or raises (`lint/rules/_devices.py`). The move
    really costs something — the data stays where it was — when the receiver was made without that
    placement (`torch.from_numpy`, `torch.ones(n)` on the default device), arrived as a parameter,
    or one operand of its computation is a tensor of unknown placement (a 0-dim CPU tensor combined
    with a CUDA tensor gives a CUDA result, so `k`'s device is not enough there).

    ## Why is this bad?
    Unlike `nn.Module.to`, which moves the module in place and returns it, `Tensor.to` and the
    other methods here return a new tensor and leave `x` unchanged (the in-place variants end in
    `_`: `clamp_`, `add_`). On torch 2.13 `x.to(torch.float64)` on its own line changes nothing:
    the data stays on the CPU / in the old dtype and a later step fails with a device or dtype
    mismatch — or silently computes on the unconverted values.

    ## Fix safety
    No autofix: assign the result (`x = x.to(device)`) or use the in-place variant — which one is
    meant depends on whether other references to the tensor should see the change.
    """

    code = "TP417"
    category = Category.TRAINING
    severity = Severity.WARNING
    requires = (
        "the receiver is a tensor by local dataflow (a batch, a model output, a factory's result), not a "
        "module",
    )
    message = "this tensor method returns a new tensor and leaves the original unchanged: the result is discarded"
    fix_hint = "assign the result (`x = x.to(device)`) or use the in-place variant (`x.clamp_(...)`)"
    nodes = (ast.Expr,)

    valid = ["""
import torch
model.to(device)
net = Net()
net.cuda()
x = x.to(device)
x.clamp_(0, 1)
for images, labels in loader:
    images = images.to(device)
for batch in loader:
    batch.to(device)
class Strategy:
    def setup(self):
        self.model = torch.zeros(1)
        self.model.to(self.root_device)
""",
        """
import torch
net = torch.load("whole_model.pt", weights_only=False)
net.cuda()
net.half()
""",
        """
import torch
from torch import nn
qnet = torch.quantization.quantize_dynamic(float_net, {nn.Linear}, dtype=torch.qint8)
qnet.to("cpu")
scripted = torch.jit.load("exported.pt")
scripted.cuda()
""",
        """
import numpy as np
import torch
grid = np.empty((8, 8))
grid.fill(0.5)
grid.reshape(64)
""",
        """
import torch
import some_runtime
engine = some_runtime.compile_model("model.onnx")
engine.to(device="cuda")
engine.half()
""",
        """
import torch
def place(thing, device):
    thing.to(device)
    return thing
""",
        """
import math
import numpy as np
import torch
def shrink(rate: torch.Tensor, n: int):
    root = torch.sqrt(9 * rate ** 2 + (n + 1) ** 2)
    low = (-3 * rate + root) / (n + 1)
    high = (n + 1 + 3 * rate + root) / 4
    gap = (4 * high * low) / (1 + low) - n * math.log(n + 2)
    gap.to(rate.device)
    low.to(rate.device)
    offset = gap * np.float64(0.5) + len(rate.shape)
    offset.to(device=rate.device)
    return gap, offset
""",
        """
import torch
def causal_bias(q, steps):
    for _ in range(steps):
        bias = torch.zeros(4, 4, dtype=q.dtype, device=q.device)
        bias.masked_fill_(bias > 0, float("-inf"))
        bias.to(q.dtype)
        bias.to(q.device, non_blocking=True)
""",
        """
import torch
def pad_like(x, flag, dev):
    fill = torch.zeros_like(x) if flag else torch.ones_like(x)
    fill.to(x.device)
    if flag:
        grid = torch.arange(8, device=dev).float() / 8
        grid.to(dev)
""",
        """
import torch
w = torch.randn(3).cuda()
scaled = w.clamp(0, 1) * 2
scaled.cuda()
host = torch.ones(2).cpu() + 1
host.cpu()
""",
        """
import torch
def first_column(logits: torch.Tensor):
    probs = logits.softmax(-1)[:, 0].unsqueeze(1)
    probs.to(logits.device)
    return probs
""",
    ]
    invalid = [Invalid("""
import torch
for images, labels in loader:
    images.to(device)
    labels.cuda()
    logits = model(images)
""", count=2, severity=Severity.INFO),
        Invalid("""
import torch
weights = torch.zeros(3, 4)
weights.cuda()
""", count=1),
        Invalid("""
import torch
def prepare(batch: torch.Tensor, device):
    batch.to(device)
    return batch
"""),
        Invalid("""
import numpy as np
import torch
arr = torch.from_numpy(np.zeros(6))
arr.reshape(2, 3)
"""),
        Invalid("""
import torch
t = torch.ones(2)
t.to(device=dev, dtype=torch.float16)
"""),
        Invalid("""
import torch
mask = torch.ones(4).bool() if keep else torch.zeros(4).bool()
mask.long()
"""),
        Invalid("""
import torch
def shrink(rate: torch.Tensor, other: torch.Tensor, n: int):
    gap = (other - 3 * rate) / (n + 1)
    gap.to(rate.device)
"""),
        Invalid("""
import torch
def causal_bias(q, kv):
    bias = torch.zeros(4, 4, device=q.device)
    bias.to(kv.device)
    bias.to(q.dtype)
    q = kv
    bias.to(q.device)
""", count=3),
        Invalid("""
import torch
def pad_like(x, flag):
    fill = torch.zeros_like(x) if flag else torch.zeros(3)
    fill.to(x.device)
"""),
        Invalid("""
import numpy as np
import torch
w = torch.from_numpy(np.ones(3)) * 2
w.cuda()
kept = torch.randn(3).cuda()
kept.to("cuda", copy=True)
""", count=2),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Expr)
        call = node.value
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in PURE):
            return
        recv = call.func.value
        if ctx.resolve(call.func) is not None:
            return
        if call.func.attr in MODULE_METHODS and not isinstance(recv, ast.Name):
            return  # `self.model.to(device)`: attributes are often modules that dataflow cannot see
        if call.func.attr in SHARED:
            if not resolved_tensor(recv, ctx):
                return  # a module, a batch object, an unpickled model, an array: .to() may work in place
        else:
            kinds = ctx.kinds(recv)  # a name only tensors have: a value typed as one suffices
            if not kinds & TENSOR_KINDS or MODULE in kinds:
                return
        if call.func.attr in ("to", "cuda", "cpu") and already_placed(call, ctx):
            return  # the conversion returns ``recv`` itself: dropping it loses nothing
        yield self.hit(call, subject=ctx.locator.source(recv))
