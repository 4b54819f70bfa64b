"""Hand-written export/compile targets, one per failure mode, and a clean one.

Each FUNC returns (model, args) or (model, args, kwargs), as `torchpact export-check FILE.py:FUNC`
expects. Seeds are fixed so the behaviour the tests assert does not depend on the initialisation.
"""

import torch
from torch import nn


class Gate(nn.Module):
    """Branches on a tensor value: the trace keeps the example's branch."""

    def forward(self, x):
        if x.sum() > 0:  # GATE_LINE
            return x * 2
        return x - 1


class ItemScale(nn.Module):
    """Reads a Python number from a tensor: the trace keeps the example's number."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        scale = x.abs().max().item()  # ITEM_LINE
        return self.fc(x) / scale


class BatchCount(nn.Module):
    """Multiplies by the batch size read into Python: trace and torch.export freeze it."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        n = int(x.shape[0])  # BATCH_LINE
        return self.fc(x) * n


class RowLoop(nn.Module):
    """Loops over the batch dimension: the trace unrolls the example's number of rows."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        rows = [self.fc(row) for row in x]  # LOOP_LINE
        return torch.stack(rows)


class Clean(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Dropout(0.1), nn.Linear(16, 4))
        self.norm = nn.LayerNorm(4)

    def forward(self, x):
        return self.norm(self.net(x)).softmax(-1)


class BNNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.bn = nn.BatchNorm1d(8)

    def forward(self, x):
        return self.bn(self.fc(x))


class Result:
    """Not a tensor, not a container, not registered with torch's pytree."""

    def __init__(self, logits):
        self.logits = logits


class CustomOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x), Result(self.fc(x))


class DictOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return {"logits": self.fc(x)}


class LogSigmoidHead(nn.Module):
    """log(sigmoid(x)) for large negative logits: ONNX's LogSigmoid decomposition is not stable."""

    def forward(self, x):
        return nn.functional.logsigmoid(x)


class ErfInv(nn.Module):
    def forward(self, x):
        return torch.erfinv(torch.tanh(x))


class SizePool(nn.Module):
    """Pools over the whole image with a kernel read into Python: only other image sizes expose it."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        kernel = (int(y.shape[2]), int(y.shape[3]))  # SIZE_LINE
        return nn.functional.avg_pool2d(y, kernel).flatten(1)


class ItemBreak(nn.Module):
    """`.item()` in forward: a torch.compile graph break."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        peak = h.abs().max().item()  # BREAK_LINE
        return h / (peak + 1.0)


class FixedBatch(nn.Module):
    """Takes exactly the example's batch: other batch sizes are no input for it, even in eager."""

    def forward(self, x):
        return x.view(4, 2, 4).sum(1)


def _x(batch=4):
    torch.manual_seed(0)
    return torch.rand(batch, 8) + 0.5  # positive: Gate takes its `x * 2` branch


def gate():
    return Gate(), (_x(),)


def item_scale():
    torch.manual_seed(0)
    return ItemScale().eval(), (_x(),)


def batch_count():
    torch.manual_seed(0)
    return BatchCount().eval(), (_x(),)


def row_loop():
    torch.manual_seed(0)
    return RowLoop().eval(), (_x(),)


def clean():
    torch.manual_seed(0)
    return Clean().eval(), (_x(),)


def training_dropout():
    torch.manual_seed(0)
    return Clean(), (_x(),)  # no .eval(): Dropout is live


def training_batchnorm():
    torch.manual_seed(0)
    return BNNet(), (torch.randn(6, 8) * 3 + 1,)


def custom_output():
    torch.manual_seed(0)
    return CustomOutput().eval(), (_x(),)


def dict_output():
    torch.manual_seed(0)
    return DictOutput().eval(), (_x(),)


def logsigmoid():
    torch.manual_seed(0)
    return LogSigmoidHead(), (torch.randn(4, 8) * 3,)


def erfinv():
    return ErfInv(), (torch.randn(4, 8),)


def size_pool():
    torch.manual_seed(0)
    return SizePool().eval(), (torch.rand(4, 3, 8, 8),)


def item_break():
    torch.manual_seed(0)
    return ItemBreak().eval(), (_x(),)


def fixed_batch():
    return FixedBatch(), (_x(),)


def kwargs_target():
    torch.manual_seed(0)
    return Clean().eval(), (), {"x": _x()}


# bad targets ---------------------------------------------------------------------------------------
NOT_CALLABLE = 3


def returns_model_only():
    return Clean()


def returns_wrong_model():
    return "model", (torch.ones(1),)


def raises():
    raise ValueError("no weights here")


def bad_kwargs():
    return Clean(), (_x(),), ["x"]
