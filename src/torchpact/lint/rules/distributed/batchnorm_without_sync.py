from __future__ import annotations

import ast
import re
from typing import Iterator

from torchpact.findings import Category, Severity
from torchpact.lint.context import FileContext, argument
from torchpact.lint.rule import Hit, Rule
from torchpact.lint.rules._modules import layer_used
from torchpact.lint.rules.distributed._util import DDP_CALLEES, is_ddp_call

BATCHNORMS = {f"torch.nn.{p}BatchNorm{d}d" for p in ("", "Lazy") for d in (1, 2, 3)}
# torchvision constructors whose models are built from BatchNorm layers
_TORCHVISION_BN = re.compile(
    r"^torchvision\.models\.(.+\.)?(resnet\d+|resnext\w+|wide_resnet\w+|densenet\d+|mobilenet_v[23]\w*|"
    r"efficientnet_\w+|regnet_\w+|vgg\d+_bn|inception_v3|googlenet|mnasnet\w+|shufflenet_v2\w*)$")
_SYNC_WORDS = ("SyncBatchNorm", "convert_sync_batchnorm", "sync_bn", "sync_batchnorm", "syncbn")


class BatchnormWithoutSync(Rule):
    """A model with BatchNorm layers is wrapped in `DistributedDataParallel` without `SyncBatchNorm`.

    ## What it does
    Flags `DistributedDataParallel(model)` when the model builds BatchNorm layers (`nn.BatchNorm1d/2d/3d`,
    or a torchvision model made of them such as `resnet50()`) and the file never mentions
    `SyncBatchNorm` / `convert_sync_batchnorm`. A model whose class is defined in the file is looked
    into (with the local classes it builds); otherwise any BatchNorm built in the file counts. A
    BatchNorm built but never called keeps no statistics and does not count: bound to a name or
    attribute nothing in the file reads, or dropped (`rules/_modules.py`). Advice (`info`): per-rank
    statistics are often what is wanted (large per-GPU batches, or a deliberate choice); the point is to
    make it a choice.

    ## Why is this bad?
    Under DDP each rank's BatchNorm normalises its training batch with that rank's own batch
    statistics: the effective BatchNorm batch is the per-GPU batch, not the global one, which hurts
    when it is small. The running statistics do not combine ranks either. On torch 2.13 with 2 gloo
    ranks fed different data, `running_mean` differs between the ranks after every step; with the
    default buffer sync, DDP then overwrites every rank's buffers with rank 0's at the start of the
    next forward, so the running statistics that end up in the model (and that evaluation uses) are
    estimated from rank 0's batches alone (a BatchNorm fed only rank 0's batches ends with the same
    `running_mean`, bit for bit). With `broadcast_buffers=False` / `forward_sync_buffers=False` they diverge for good
    and the ranks' eval outputs differ. `nn.SyncBatchNorm.convert_sync_batchnorm(model)` (GPU modules
    only in torch 2.13) computes the statistics over the global batch instead.

    ## Fix safety
    No autofix: SyncBatchNorm adds a collective per BatchNorm layer and per forward, requires GPU
    modules, and changes the training dynamics; whether that is wanted is the author's call.
    """

    code = "TP605"
    category = Category.DISTRIBUTED
    severity = Severity.INFO
    requires = (
        "the model wrapped in DDP builds BatchNorm layers and the file never mentions SyncBatchNorm",
    )
    facts = ("batchnorm-under-ddp-uses-local-statistics",)
    message = ("a model with BatchNorm is wrapped in DDP without SyncBatchNorm: each rank normalises with its own "
               "batch statistics and the running stats come from rank 0's data only")
    fix_hint = ("convert before wrapping: `model = nn.SyncBatchNorm.convert_sync_batchnorm(model)` "
                "(or keep per-rank BN on purpose)")
    nodes = (ast.Call,)
    calls = DDP_CALLEES
    triggers = ("DistributedDataParallel",)

    valid = [
        """
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU())
model = nn.SyncBatchNorm.convert_sync_batchnorm(model).to(rank)
ddp = DDP(model, device_ids=[rank])
""",
        """
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
model = nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16))
ddp = DDP(model)
""",
        """
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))
class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8))
policy = DDP(Policy())
""",
        """
import torch
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP
def main(args, rank):
    model = torchvision.models.vit_b_16()
    if args.sync_bn:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    return DDP(model.to(rank), device_ids=[rank])
""",
        """
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
class Tower(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.mlp = nn.Linear(width, width)
        self.unused_bn = nn.BatchNorm1d(width) if width > 8 else None

    def forward(self, x):
        return self.mlp(x).relu()
replica = DDP(Tower(16).cuda(rank), device_ids=[rank])
""",
        """
import torch
from torch import nn
def build(rank):
    norm = nn.BatchNorm2d(8)
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.GroupNorm(2, 8))
    return torch.nn.parallel.DistributedDataParallel(net.to(rank), device_ids=[rank])
""",
    ]
    invalid = [
        """
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3)
        self.bn = nn.BatchNorm2d(16)
    def forward(self, x):
        return self.bn(self.conv(x))
ddp = DDP(Net().to(rank), device_ids=[rank])
""",
        """
import torch
from torchvision.models import resnet50
def main(rank):
    model = resnet50().to(rank)
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
""",
        """
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
class Tower(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.mlp = nn.Linear(width, width)
        self.bn = nn.BatchNorm1d(width) if width > 8 else None

    def forward(self, x):
        x = self.mlp(x)
        return self.bn(x) if self.bn is not None else x
replica = DDP(Tower(16).cuda(rank), device_ids=[rank])
""",
        """
import torch
from torch import nn
def build(rank):
    norm = nn.BatchNorm2d(8)
    net = nn.Sequential(nn.Conv2d(3, 8, 3), norm)
    return torch.nn.parallel.DistributedDataParallel(net.to(rank), device_ids=[rank])
""",
    ]

    def check(self, node: ast.AST, ctx: FileContext) -> Iterator[Hit]:
        assert isinstance(node, ast.Call)
        wrapped = argument(node, "module", 0)
        if not is_ddp_call(ctx, node) or wrapped is None:
            return
        if any(word in ctx.source.text for word in _SYNC_WORDS):
            return  # SyncBatchNorm is used or considered (often behind a flag)
        cls = ctx.local_module_class(wrapped)
        if cls is not None:
            # a model class of this file: look inside it (and the local classes it builds)
            region: list[ast.AST] = list(_class_closure(ctx, cls))
        else:
            region = [ctx.tree]
        bn = next((c for root in region for c in ast.walk(root)
                   if _builds_batchnorm(ctx, c) and layer_used(c, ctx)), None)
        if bn is not None:
            yield self.hit(node, subject=ctx.segment(bn.func) or None)


def _builds_batchnorm(ctx: FileContext, call: ast.AST) -> bool:
    name = ctx.call_name(call)
    return name is not None and (name in BATCHNORMS or bool(_TORCHVISION_BN.match(name)))


def _class_closure(ctx: FileContext, cls: ast.ClassDef) -> Iterator[ast.ClassDef]:
    """``cls``, its local base classes, and the local module classes it instantiates, transitively."""
    seen: set[str] = set()
    todo = [cls]
    while todo:
        current = todo.pop()
        if current.name in seen:
            continue
        seen.add(current.name)
        yield current
        names = [b.id for b in current.bases if isinstance(b, ast.Name)]
        names += [n.func.id for n in ast.walk(current) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
        todo.extend(ctx.classes[n] for n in names if n in ctx.classes and n not in seen)
