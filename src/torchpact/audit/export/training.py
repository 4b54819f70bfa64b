"""TP702: a model handed over in training mode with live Dropout / BatchNorm, shown by calling it."""

from __future__ import annotations

from typing import Any

from torchpact.audit import _common as C
from torchpact.audit.export.checks import TRAINING_MODE
from torchpact.audit.variants import Variant
from torchpact.findings import Finding


def _mode_dependent(model: Any) -> tuple[list[str], list[str]]:
    from torch import nn

    drops = [n or type(model).__name__ for n, m in model.named_modules()
             if isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0 and m.training]
    norms = [n or type(model).__name__ for n, m in model.named_modules()
             if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training]
    return drops, norms


def training_mode(model: Any, example: Variant, path: str | None, line: int | None) -> Finding | None:
    """TP702 when the model is in training mode and that changes what it computes; puts it in eval mode."""
    import copy

    import torch

    if not model.training:
        return None
    drops, norms = _mode_dependent(model)
    if not drops and not norms:
        return None
    state = copy.deepcopy({k: v for k, v in model.state_dict().items()})
    evidence = []
    try:
        with torch.random.fork_rng(), torch.no_grad(), C.quiet():
            torch.manual_seed(0)
            a, _ = C.output_leaves(model(*example.args, **example.kwargs))
            b, _ = C.output_leaves(model(*example.args, **example.kwargs))
            model.eval()
            e, _ = C.output_leaves(model(*example.args, **example.kwargs))
        if drops and not C.compare(a, [t for _, t in b]).ok:
            evidence.append("two calls on the same input gave different outputs (dropout is live)")
        cmp = C.compare(a, [t for _, t in e])
        if norms and not cmp.ok:
            evidence.append("BatchNorm normalises with the batch's own statistics, so each output depends on "
                            f"the rest of the batch (train vs eval output differs by up to {cmp.max_abs_err:.3g})")
    except Exception:
        pass
    finally:
        model.load_state_dict(state)
        model.eval()
    layers = []
    if drops:
        layers.append(f"{len(drops)} Dropout layer{'s' * (len(drops) != 1)} "
                      f"({', '.join(drops[:3])}{', ...' if len(drops) > 3 else ''})")
    if norms:
        layers.append(f"{len(norms)} BatchNorm layer{'s' * (len(norms) != 1)} "
                      f"({', '.join(norms[:3])}{', ...' if len(norms) > 3 else ''})")
    message = (f"the model was handed over in training mode with {' and '.join(layers)}: "
               + ("; ".join(evidence) if evidence else "they behave as in training")
               + ". Every exporter records this mode, so the artifact would too; torchpact checked the paths in eval "
                 "mode")
    return C.finding(TRAINING_MODE, message, path=path, line=line, subject=", ".join((drops + norms)[:4]),
                    fix="call `model.eval()` before exporting")
