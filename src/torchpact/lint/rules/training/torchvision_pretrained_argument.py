from __future__ import annotations

import ast
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, is_const
from torchpact.lint.rule import Hit, Invalid, Rule

LEGACY = {"pretrained": "weights", "pretrained_backbone": "weights_backbone"}


class TorchvisionPretrainedArgument(Rule):
    """A torchvision model builder is given the deprecated `pretrained=` instead of `weights=`.

    ## What it does
    Flags calls of `torchvision.models.*` builders (`resnet50(...)`, `detection.fasterrcnn_*`...)
    that pass `pretrained` or `pretrained_backbone` (TorchFix TOR201).

    ## Why is this bad?
    Since torchvision 0.13 the builders warn `The parameter 'pretrained' is deprecated since 0.13
    and may be removed in the future, please use 'weights' instead.` `pretrained=True` also hides
    *which* weights are loaded: it maps to each model's first legacy checkpoint (`IMAGENET1K_V1`),
    not to its better `DEFAULT` weights, which is easy to miss when comparing accuracies.

    ## Fix safety
    `pretrained=False` becomes `weights=None` (and `pretrained_backbone=False` becomes
    `weights_backbone=None`), which builds the same untrained model. `pretrained=True` is reported
    without a fix: the equivalent is the model's own `*_Weights.IMAGENET1K_V1` enum (TorchFix
    knows the table), which the author should choose knowingly.
    """

    code = "TP410"
    category = Category.TRAINING
    severity = Severity.WARNING
    requires = (
        "the builder resolves to a `torchvision.models` function through the file's imports",
    )
    message = "`pretrained=` is deprecated since torchvision 0.13 and hides which weights are loaded"
    fix_hint = "pass `weights=<Model>_Weights.IMAGENET1K_V1` (what `pretrained=True` loaded), `\"DEFAULT\"`, or None"
    nodes = (ast.Call,)
    triggers = ("pretrained",)
    needs_torch_import = False
    needs_import = "torchvision"
    fixable = True
    proof = ("needs torchvision, which is not a torchpact test dependency (no torchvision build matches "
             "the pinned torch 2.13 CPU wheel)")

    valid = ["""
import torchvision
from torchvision.models import resnet50, ResNet50_Weights
m = resnet50(weights=ResNet50_Weights.IMAGENET1K_V2)
n = torchvision.models.resnet18(weights=None)
hf = AutoModel.from_pretrained("bert-base-uncased")
"""]
    invalid = [
        Invalid("""
import torchvision
from torchvision.models import detection
m = torchvision.models.resnet18(pretrained=False)
det = detection.fasterrcnn_resnet50_fpn(pretrained=False, pretrained_backbone=False)
""", fixed="""
import torchvision
from torchvision.models import detection
m = torchvision.models.resnet18(weights=None)
det = detection.fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None)
""", count=2),
        """
from torchvision import models
backbone = models.resnet50(pretrained=True)
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        qn = ctx.call_name(node) or ""
        if not qn.startswith("torchvision.models.") or not qn.rsplit(".", 1)[1][:1].islower():
            return
        legacy = [k for k in node.keywords if k.arg in LEGACY]
        if not legacy:
            return
        edits = [ctx.locator.replace(k, f"{LEGACY[k.arg]}=None") for k in legacy if is_const(k.value, False)]
        if len(edits) != len(legacy):
            edits = []
        yield self.hit(node, subject=qn, edits=edits)
