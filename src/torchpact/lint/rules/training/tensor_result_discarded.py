from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import (
    BATCH, GRAD_LEAF, GRAPH, LOSS, MODULE, OUTPUT, TENSOR, FileContext,
)
from torchpact.lint.rule import Hit, Invalid, Rule
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
        yield self.hit(call, subject=ctx.locator.source(recv))
