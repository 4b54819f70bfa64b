"""A spectral-normalised layer run in eval mode while its power iteration was never refined for its weight
(pytorch/pytorch#51800).

Spectral normalisation divides a weight by ``sigma = u^T W v``, where ``u`` and ``v`` are estimates of
its first singular vectors kept as buffers. Both torch APIs refine them by power iteration only in
forwards in train mode (grad mode does not matter); in eval mode they are used as they are. The old
hook API (``torch.nn.utils.spectral_norm``) starts them random, so an eval forward before the first
training forward divides by a random projection — small, often negative. The parametrization API
(``torch.nn.utils.parametrizations.spectral_norm``) runs 15 iterations at registration, which a weight
re-initialised afterwards no longer matches.

Seen at the models' outermost calls (every step, one dict look-up each): when a model is called, each
spectral-normalised layer inside it that is in eval mode and not yet checked is checked once — the
sigma its forward will use against the weight's spectral norm (one SVD of the weight matrix, once per
layer). A sigma below a third of the spectral norm, or negative, is reported: after a single training
forward it is already above 0.6 for the layer shapes of a GAN discriminator (measured on torch 2.13), and
before any it is below 0.15. Lazy modules were checked as well: a lazy layer materialised by an eval or
``no_grad`` forward trains exactly like one materialised in training, so they are no part of this check.
"""

from __future__ import annotations

import weakref
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.watcher import Check, Watcher

RATIO = 1 / 3   # sigma used / spectral norm below this: the eval weight is over 3x too large (or sign-flipped)

SPECTRAL_NORM_EVAL = Check(
    code="TP467",
    category=Category.TRAINING,
    severity=Severity.WARNING,
    summary="A spectral-normalised layer runs in eval mode before its power iteration was refined: its weight "
            "is divided by a random sigma.",
    doc="""## What it does
At runtime, when a model is called, checks each layer inside it that holds spectral normalisation
(`torch.nn.utils.spectral_norm` or `torch.nn.utils.parametrizations.spectral_norm`) and is in eval
mode, once per layer: it compares the sigma the forward uses (`u^T W v`, from the layer's `u` and `v`
buffers) with the weight's actual spectral norm, and reports a sigma below a third of it or negative.

## Why is this bad?
Spectral normalisation divides the weight by `sigma = u^T W v`; `u` and `v` are refined by power
iteration only in forwards in train mode (torch 2.13, both APIs; `no_grad` does not matter). With
`torch.nn.utils.spectral_norm` they start random, so a model evaluated before its first training
forward — a baseline validation, samples drawn before training, an EMA copy made at initialisation
that only receives parameters — divides every weight by a random projection: outputs come out tens to
thousands of times too large, often with flipped signs (pytorch/pytorch#51800). The parametrization
API runs 15 iterations at registration, but a weight re-initialised afterwards (through
`parametrizations.weight.original`) no longer matches them. Nothing warns; the first training forward
repairs it silently.

## How to fix
Run one forward in train mode before evaluating (under `torch.no_grad()` it still refines `u` and
`v`), or use `torch.nn.utils.parametrizations.spectral_norm` and initialise the weight before
registering it. For an EMA copy, average the buffers too (`u`, `v`) or copy them from the trained model.""",
)


class SpectralNormEval(Watcher):
    """TP467: spectral normalisation used in eval mode with unrefined power-iteration vectors."""

    name = "spectral_norm_eval"
    checks = (SPECTRAL_NORM_EVAL,)
    unsampled_calls = "roots"

    def __init__(self) -> None:
        super().__init__()
        self._roots: dict[int, tuple[weakref.ref, list]] = {}   # root id -> (root, its layers still to check)
        self._classes: tuple[type, type] | None = None

    def on_forward_pre(self, module: Any, args: tuple) -> None:
        if self.session.depth != 1:
            return  # only the outermost call of a model looks inside it
        entry = self._roots.get(id(module))
        if entry is None or entry[0]() is not module:
            entry = self._roots[id(module)] = (weakref.ref(module), self._layers(module))
        layers = entry[1]
        if not layers:
            return
        for item in list(layers):
            layer = item[0]()
            if layer is None:
                layers.remove(item)
            elif not layer.training:
                layers.remove(item)
                self._check(module, layer, item[1], item[2])

    def _layers(self, root: Any) -> list:
        """(layer, parameter name, the spectral-norm object) of every spectral-normalised layer of ``root``."""
        if self._classes is None:
            from torch.nn.utils.parametrizations import _SpectralNorm
            from torch.nn.utils.spectral_norm import SpectralNorm

            self._classes = (SpectralNorm, _SpectralNorm)
        hook_class, param_class = self._classes
        found = []
        for layer in root.modules():
            for hook in layer._forward_pre_hooks.values():
                if isinstance(hook, hook_class):
                    found.append((weakref.ref(layer), hook.name, hook))
            parametrizations = layer.__dict__.get("_modules", {}).get("parametrizations")
            if parametrizations is not None:
                for pname, plist in parametrizations.items():
                    for p in plist:
                        if isinstance(p, param_class):
                            found.append((weakref.ref(layer), pname, p))
        return found

    def _check(self, root: Any, layer: Any, pname: str, sn: Any) -> None:
        import torch

        if torch.compiler.is_compiling():
            return
        with torch.no_grad():
            if isinstance(sn, self._classes[0]):  # the hook API
                weight = getattr(layer, pname + "_orig")
                u, v = getattr(layer, pname + "_u"), getattr(layer, pname + "_v")
                matrix = sn.reshape_weight_to_matrix(weight.detach())
            else:
                weight = layer.parametrizations[pname].original
                if weight.ndim <= 1:
                    return  # a vector is normalised by its norm, with no power iteration
                u, v = sn._u, sn._v
                matrix = sn._reshape_weight_to_matrix(weight.detach())
            if matrix.device.type == "meta" or not matrix.is_floating_point():
                return
            matrix = matrix.float()
            used, norm = torch.stack([torch.dot(u.float(), torch.mv(matrix, v.float())),
                                      torch.linalg.matrix_norm(matrix, ord=2)]).tolist()
        if not norm > 0 or used >= RATIO * norm:
            return
        self._report(root, layer, pname, sn, used, norm)

    def _report(self, root: Any, layer: Any, pname: str, sn: Any, used: float, norm: float) -> None:
        names = self.session.names
        name, root_name = names.module(layer), names.module(root)
        api = ("torch.nn.utils.spectral_norm" if isinstance(sn, self._classes[0])
               else "torch.nn.utils.parametrizations.spectral_norm")
        called = f" when `{root_name}` is called" if root is not layer else ""
        factor = norm / abs(used) if used else float("inf")
        sign = ", with its sign flipped" if used < 0 else ""
        self.session.report(
            SPECTRAL_NORM_EVAL,
            f"`{name}` ({type(layer).__name__}, {api}) is in eval mode{called}, and its power iteration was "
            f"never refined for its weight: its forward divides `{pname}` by sigma={used:.3g} instead "
            f"of its spectral norm {norm:.3g}, so the weight it uses is {factor:.3g}x too large{sign}; u and v are "
            "refined only by forwards in train mode",
            subject=name, key=("sn", id(layer), pname), sigma_used=used, spectral_norm=norm,
            fix="run one forward in train mode before evaluating (no_grad is fine), or use "
                "torch.nn.utils.parametrizations.spectral_norm and initialise the weight before registering it; "
                "an EMA copy must receive the u/v buffers too")
