"""The cheap check of every step: are the gradients about to be applied finite?

In the optimizer's step pre-hook, on CPU, sums of the gradients (``surely_finite``: the small ones within one
copy, the big ones each alone), else one ``_foreach_norm`` over them. On CUDA it is read one step late, without a sync
(``Deferred``); on CPU, when the script's own ``clip_grad_norm_`` has just computed the total norm of
these very gradients, that number is read instead (``ClipNorms``).
"""

from __future__ import annotations

import math
import weakref
from typing import Any, Callable

from torchpact.watch.watchers._patch import parameter_list


class Deferred:
    """A per-step gradient check computed on the device, read later without stalling the stream (at once on CPU)."""

    def __init__(self, value: Any, step: int, params: list[Any]) -> None:
        import torch

        self.step = step
        self.params = params  # alive anyway (the model holds them); dropped at the next poll
        self.event = None
        if value.device.type == "cuda":
            self.host = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
            self.host.copy_(value, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record(torch.cuda.current_stream(value.device))
        else:
            self.host = value

    def ready(self) -> bool:
        return self.event is None or bool(self.event.query())

    def value(self) -> list[float]:
        if self.event is not None:
            self.event.synchronize()  # at the end of the run only; otherwise read once ready()
        return self.host.tolist()


class ClipNorms:
    """The total norm of the script's last ``clip_grad_norm_`` on CPU, with the gradients it covered."""

    def __init__(self, recording: Callable[[], bool]) -> None:
        # (total norm, {id(grad): (weak grad, version)}) of the last clip_grad_norm_ on CPU (see says_finite)
        self.clipped: tuple[Any, dict[int, tuple[weakref.ref, int]]] | None = None
        self.recording = recording   # a recorded step reads every gradient's norm anyway: no clip is noted
        self.since_step = False      # a clip ran since the last optimizer step (gradients changed after backward)

    def wrap(self, original: Callable) -> Callable:
        def clip_grad_norm_(parameters: Any, max_norm: Any, norm_type: Any = 2.0, *args: Any, **kwargs: Any) -> Any:
            import torch

            params = parameter_list(parameters)
            total = original(params, max_norm, norm_type, *args, **kwargs)
            self.clipped = None
            self.since_step = True
            if type(total) is not torch.Tensor or total.device.type != "cpu" or self.recording():
                return total
            try:  # a 0-norm counts NaN as non-zero; a NaN max_norm makes every gradient NaN
                trusted = float(norm_type) >= 1 and math.isfinite(max_norm)
            except (TypeError, ValueError, RuntimeError):
                trusted = False
            if trusted:
                kept = {id(g): (weakref.ref(g), g._version) for p in params if (g := p.grad) is not None}
                self.clipped = (total, kept)
            return total
        return clip_grad_norm_

    def take(self) -> tuple[Any, dict[int, tuple[weakref.ref, int]]] | None:
        clipped, self.clipped = self.clipped, None
        return clipped

    @staticmethod
    def says_finite(clipped: tuple[Any, dict[int, tuple[weakref.ref, int]]], grads: list[Any]) -> bool:
        """Whether the total norm the script's own ``clip_grad_norm_`` just computed over these very gradients
        (same tensors, unchanged since: the clip's own scaling is counted in the versions kept) is finite.
        A p-norm (p >= 1, or inf) of finite values is finite or overflows to inf, and NaN or inf in any of
        them makes it non-finite; scaling by a finite factor of at most 1 keeps them finite. So one read
        of a number already computed replaces this step's per-tensor norms (HF Trainer and most LM
        scripts clip every step); otherwise, or when it is not finite, the gradients are checked as usual."""
        total, kept = clipped
        for g in grads:
            seen = kept.get(id(g))
            if seen is None or seen[0]() is not g or g._version != seen[1]:
                return False
        return math.isfinite(total.item())
