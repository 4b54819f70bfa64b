"""The kinds a value can have (what ``ctx.kinds`` answers with), how each reads in a reason, and the
names in torch's API and its ecosystem that tell them (module bases, DDP wrappers, functional losses,
methods that keep or cut a graph)."""

from __future__ import annotations

from enum import Enum


class Kind(str, Enum):
    """A kind a value can have. Each is also its string (``"loss" in ctx.kinds(x)`` reads the same as
    ``LOSS in ctx.kinds(x)``), with the same hash, so sets of kinds keep their order."""

    MODULE = "module"          # an nn.Module instance (a model, a layer, a DDP wrapper)
    DDP = "ddp"                # a DistributedDataParallel / DataParallel / FSDP wrapper
    LOSS_FN = "loss_fn"        # a loss module such as nn.CrossEntropyLoss()
    LOSS = "loss"              # a loss value (result of a loss call, or what .backward() is called on)
    OUTPUT = "output"          # the output of calling a module
    GRAPH = "graph"            # a tensor attached to an autograd graph (computed with grad enabled)
    GRAD_LEAF = "grad_leaf"    # a leaf tensor that requires grad (requires_grad=True, nn.Parameter)
    TENSOR = "tensor"
    OPTIMIZER = "optimizer"
    SCHEDULER = "scheduler"
    SCALER = "scaler"          # torch.amp.GradScaler
    LOADER = "loader"          # torch.utils.data.DataLoader
    SAMPLER = "sampler"        # DistributedSampler
    DIST_SAMPLER = "dist_sampler"
    BATCH = "batch"            # what iterating a loader yields
    NUMBER = "number"          # a Python number (e.g. from .item())

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


MODULE, DDP, LOSS_FN, LOSS, OUTPUT, GRAPH, GRAD_LEAF, TENSOR = (
    Kind.MODULE, Kind.DDP, Kind.LOSS_FN, Kind.LOSS, Kind.OUTPUT, Kind.GRAPH, Kind.GRAD_LEAF, Kind.TENSOR)
OPTIMIZER, SCHEDULER, SCALER, LOADER, SAMPLER, DIST_SAMPLER, BATCH, NUMBER = (
    Kind.OPTIMIZER, Kind.SCHEDULER, Kind.SCALER, Kind.LOADER, Kind.SAMPLER, Kind.DIST_SAMPLER, Kind.BATCH, Kind.NUMBER)

# How a kind reads in a reason ("`model` is taken for a module by its name").
PHRASE = {
    MODULE: "a module", DDP: "a DDP/FSDP wrapper", LOSS_FN: "a loss function", LOSS: "a loss",
    OUTPUT: "a model output", GRAPH: "a graph-attached tensor", GRAD_LEAF: "a tensor that requires grad",
    TENSOR: "a tensor", OPTIMIZER: "an optimizer", SCHEDULER: "an LR scheduler", SCALER: "a GradScaler",
    LOADER: "a DataLoader", SAMPLER: "a sampler", DIST_SAMPLER: "a DistributedSampler", BATCH: "a batch",
    NUMBER: "a number",
}

NN_MODULE_BASES = {
    "torch.nn.Module",
    "torch.nn.modules.module.Module",
    "pytorch_lightning.LightningModule",
    "lightning.LightningModule",
    "lightning.pytorch.LightningModule",
    "transformers.PreTrainedModel",
    "transformers.modeling_utils.PreTrainedModel",
}
DDP_WRAPPERS = {
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
    "torch.nn.DataParallel",
    "torch.nn.parallel.DataParallel",
    "torch.distributed.fsdp.FullyShardedDataParallel",
}
FUNCTIONAL_LOSSES = {
    "cross_entropy", "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits",
    "kl_div", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "ctc_loss",
    "poisson_nll_loss", "gaussian_nll_loss", "cosine_embedding_loss", "margin_ranking_loss",
    "hinge_embedding_loss", "multilabel_margin_loss", "multilabel_soft_margin_loss",
    "multi_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "triplet_margin_with_distance_loss",
}
# nn modules without parameters (default arguments): their output is attached to a graph only when
# their input is (tests/proofs/test_autograd_api.py builds each one).
PARAMETER_FREE_MODULES = frozenset(f"torch.nn.{name}" for name in (
    "ReLU", "ReLU6", "LeakyReLU", "RReLU", "ELU", "CELU", "SELU", "GELU", "SiLU", "Mish", "GLU", "Sigmoid",
    "Tanh", "Softmax", "Softmax2d", "Softmin", "LogSoftmax", "LogSigmoid", "Softplus", "Softsign",
    "Softshrink", "Hardshrink", "Hardtanh", "Hardswish", "Hardsigmoid", "Tanhshrink", "Threshold",
    "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout",
    "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "LPPool1d", "LPPool2d",
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d", "Flatten", "Unflatten", "Identity", "Upsample", "UpsamplingNearest2d",
    "UpsamplingBilinear2d", "PixelShuffle", "PixelUnshuffle", "ZeroPad2d", "ConstantPad1d", "ConstantPad2d",
    "ConstantPad3d", "ReflectionPad1d", "ReflectionPad2d", "ReplicationPad1d", "ReplicationPad2d",
    "CosineSimilarity", "PairwiseDistance", "Fold", "Unfold", "LocalResponseNorm",
))
# Methods that return a tensor still attached to the graph of their receiver.
GRAPH_PRESERVING_METHODS = {
    "to", "cuda", "cpu", "float", "double", "half", "bfloat16", "mean", "sum", "view", "reshape",
    "squeeze", "unsqueeze", "flatten", "contiguous", "clone", "abs", "pow", "sqrt", "exp", "log",
    "transpose", "permute", "max", "min", "norm", "type_as", "expand", "mul", "div", "add", "sub",
}
GRAPH_CUTTING_METHODS = {"detach", "item", "tolist", "numpy", "detach_", "requires_grad_"}
MODULE_RETURNING_METHODS = {"to", "cuda", "cpu", "float", "double", "half", "bfloat16", "train",
                            "eval", "requires_grad_", "type", "share_memory", "to_empty"}


def is_torch_nn_class(qn: str) -> bool:
    parts = qn.split(".")
    return (len(parts) >= 3 and parts[0] == "torch" and parts[1] == "nn" and parts[-1][:1].isupper()
            and parts[2] not in ("functional", "init", "utils"))
