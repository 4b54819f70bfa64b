from __future__ import annotations

import ast
import re
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, is_const
from torchpact.lint.rule import Hit, Invalid, Rule
from torchpact.lint.torch_version import UNKNOWN, evaluate
from torchpact.lint.analysis.following import follows_definitions

LEGACY = {"pretrained": "weights", "pretrained_backbone": "weights_backbone"}
TORCHVISION_VERSION_NAMES = frozenset({"torchvision.__version__", "torchvision.version.__version__"})
# The first torchvision whose builders take ``weights=`` (and warn on ``pretrained=``), and the one that
# goes with torch 2.13: a branch that runs on neither serves only the releases before the deprecation.
WEIGHTS_SINCE = (0, 13)
PAIRED_WITH_SUPPORTED_TORCH = (0, 28)
# A flag whose definition lint cannot see (imported from the project's own module) is read by its name:
# ``_TORCHVISION_LESS_THAN_0_13``, ``TV_GE_0_13``, ``TORCHVISION_GREATER_EQUAL_0_13_0``.
_FLAG = re.compile(r"(?i)(?:^|_)(?:torchvision|tv)_(?:version_)?(?P<op>less_than_or_equal|less_equal|less_than|"
                   r"less|lt|le|below|older_than|before|greater_than_or_equal|greater_equal|greater_than|greater|"
                   r"ge|gt|at_least|newer_than|after)_(?P<major>\d+)_(?P<minor>\d+)(?:_\d+)*$")
_BELOW = ("less", "lt", "le", "below", "older", "before")


class TorchvisionPretrainedArgument(Rule):
    """A torchvision model builder is given the deprecated `pretrained=` instead of `weights=`.

    ## What it does
    Flags calls of `torchvision.models.*` builders (`resnet50(...)`, `detection.fasterrcnn_*`...)
    that pass `pretrained` or `pretrained_backbone` (TorchFix TOR201).

    The condition it needs: the call may run with a torchvision that has `weights=`. A call in a
    branch that runs only on torchvision older than 0.13 — where `pretrained=` is the only interface
    and does not warn — is compatibility code and not flagged: the body of a test that is false on
    torchvision 0.13 and on 0.28 (the one that goes with torch 2.13), or the `else` of one that is
    true on both. The test is evaluated as Python would (`torchvision.__version__ < "0.13"` compares
    strings; `version.parse(torchvision.__version__) >= version.parse("0.13")`, a tuple parsed from the
    version string, names bound to those, `compare_version("torchvision", operator.lt, "0.13")`); a
    flag whose definition lint cannot see — imported from the project's own module — is read by its
    name, `<TORCHVISION|TV>_<LESS_THAN|LT|LE|GREATER_EQUAL|GE|...>_<major>_<minor>`.

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
""",
        """
from torchvision.models import detection
from mypackage.compat import _TORCHVISION_LESS_THAN_0_13
def build(pretrained):
    if _TORCHVISION_LESS_THAN_0_13:
        return detection.retinanet_resnet50_fpn(pretrained=pretrained, pretrained_backbone=True)
    return detection.retinanet_resnet50_fpn(weights="DEFAULT" if pretrained else None)
""",
        """
import torchvision
from packaging import version
if version.parse(torchvision.__version__) < version.parse("0.13"):
    backbone = torchvision.models.resnet50(pretrained=True)
else:
    backbone = torchvision.models.resnet50(weights="IMAGENET1K_V1")
""",
        """
from torchvision import models
from .utils import TV_GE_0_13
net = models.vgg16(weights="DEFAULT") if TV_GE_0_13 else models.vgg16(pretrained=True)
if not TV_GE_0_13:
    head = models.resnet18(pretrained=True)
""",
        """
import torchvision
VISION = tuple(int(p) for p in torchvision.__version__.split(".")[:2])
if VISION < (0, 13):
    def encoder():
        return torchvision.models.resnet34(pretrained=True)
""",
        """
import operator
import torchvision
from lightning_utilities.core.imports import compare_version
OLD_VISION = compare_version("torchvision", operator.lt, "0.13.0")
for depth in (18, 50):
    if OLD_VISION:
        model = torchvision.models.resnet18(pretrained=True)
""",
    ]
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
        Invalid("""
from torchvision.models import detection
from mypackage.compat import _TORCHVISION_GREATER_EQUAL_0_13, LEGACY_VISION
def build(pretrained):
    if _TORCHVISION_GREATER_EQUAL_0_13:
        return detection.retinanet_resnet50_fpn(pretrained=True)
    if LEGACY_VISION:
        return detection.retinanet_resnet50_fpn(pretrained=True)
""", count=2),
        Invalid("""
import torchvision
from packaging import version
if version.parse(torchvision.__version__) < version.parse("0.15"):
    backbone = torchvision.models.resnet50(pretrained=True)
if torchvision.__version__ >= "0.13":
    backbone = torchvision.models.resnet50(pretrained=True)
""", count=2),
        Invalid("""
import operator
import torchvision
from lightning_utilities.core.imports import compare_version
NEW_VISION = compare_version("torchvision", operator.ge, "0.13.0")
for depth in (18, 50):
    if NEW_VISION:
        model = torchvision.models.resnet18(pretrained=True)
"""),
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        qn = ctx.call_name(node) or ""
        if not qn.startswith("torchvision.models.") or not qn.rsplit(".", 1)[1][:1].islower():
            return
        legacy = [k for k in node.keywords if k.arg in LEGACY]
        if not legacy or serves_old_torchvision(node, ctx):
            return
        edits = [ctx.locator.replace(k, f"{LEGACY[k.arg]}=None") for k in legacy if is_const(k.value, False)]
        if len(edits) != len(legacy):
            edits = []
        yield self.hit(node, subject=qn, edits=edits)


def serves_old_torchvision(node: ast.AST, ctx: FileContext) -> bool:
    """Whether ``node`` sits in a branch that runs only on torchvision older than 0.13 (see the docs)."""
    child: ast.AST = node
    for anc in ctx.ancestors(node):
        if isinstance(anc, (ast.If, ast.IfExp)) and child is not anc.test:
            values = {_value_on(anc.test, ctx, v) for v in (WEIGHTS_SINCE, PAIRED_WITH_SUPPORTED_TORCH)}
            if len(values) == 1 and isinstance(next(iter(values)), bool):
                in_body = child in anc.body if isinstance(anc.body, list) else child is anc.body
                if in_body != next(iter(values)):
                    return True
        child = anc
    return False


@follows_definitions(UNKNOWN)
def _value_on(test: ast.AST, ctx: FileContext, version: tuple[int, int]) -> object:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _value_on(test.operand, ctx, version)
        return (not inner) if isinstance(inner, bool) else UNKNOWN
    value = evaluate(test, ctx, version, names=TORCHVISION_VERSION_NAMES)
    if isinstance(value, bool):
        return value
    if isinstance(test, (ast.Name, ast.Attribute)):
        definitions = [v for _, v in ctx.bindings(test)]
        if len(definitions) == 1 and isinstance(definitions[0], ast.Call):
            found = _compare_version_call(definitions[0], ctx, version)
            if found is not UNKNOWN:
                return found
        return _flag_by_name(test.id if isinstance(test, ast.Name) else test.attr, version)
    if isinstance(test, ast.Call):
        return _compare_version_call(test, ctx, version)
    return UNKNOWN


def _compare_version_call(call: ast.Call, ctx: FileContext, version: tuple[int, int]) -> object:
    """``compare_version("torchvision", operator.lt, "0.13")``: the package, an ``operator`` function, a release."""
    if len(call.args) < 3 or not is_const(call.args[0], "torchvision"):
        return UNKNOWN
    op = ctx.resolve(call.args[1]) or ""
    release = call.args[2]
    if not (op.startswith("operator.") and isinstance(release, ast.Constant) and isinstance(release.value, str)):
        return UNKNOWN
    return _apply(op.rpartition(".")[2], version, release.value)


def _flag_by_name(name: str, version: tuple[int, int]) -> object:
    match = _FLAG.search(name)
    if match is None:
        return UNKNOWN
    words = match["op"].lower()
    below = any(words.startswith(w) for w in _BELOW)
    inclusive = words in ("le", "less_equal", "less_than_or_equal", "ge", "greater_equal",
                          "greater_than_or_equal", "at_least")
    op = ("le" if inclusive else "lt") if below else ("ge" if inclusive else "gt")
    return _apply(op, version, f"{match['major']}.{match['minor']}")


def _apply(op: str, version: tuple[int, int], release: str) -> object:
    parts = tuple(int(p) for p in re.findall(r"\d+", release)[:2])
    if len(parts) != 2:
        return UNKNOWN
    table = {"lt": version < parts, "le": version <= parts, "gt": version > parts, "ge": version >= parts}
    return table.get(op, UNKNOWN)
