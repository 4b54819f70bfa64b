"""Progress: per-step time, loss and memory as plain data for reports, and a live progress line.

It reports no finding. The loss of a sampled step is, first found: what an ``nn.*Loss`` module
returns; the ``loss`` of a model's output (Hugging Face models given labels, as the HF Trainer
calls them); else, after ``optimizer.step()``, a 0-d tensor held under a name containing "loss" by
the frame that stepped or one of its callers (``loss = F.cross_entropy(...)`` in a plain loop), or
Lightning's closure result. It is kept as detached 0-d tensors and read once at the end, so no
host-device sync is added during training. Memory is the CUDA allocator's
``memory_allocated`` / ``memory_reserved`` when CUDA is in use (no sync), else the process's
resident set size from /proc/self/statm, both on sampled steps.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from torchpact.watch.watcher import Watcher
from torchpact.watch.watchers._rss import Rss

LINE_EVERY_S = 2.0


class Progress(Watcher):
    """Series of step time, loss and memory; a progress line on a terminal."""

    name = "progress"
    unsampled_calls = "none"
    sampled_only = frozenset({"on_step"})

    def __init__(self) -> None:
        super().__init__()
        self._loss_steps: list[int] = []
        self._loss_values: list[Any] = []
        self._loss_step = -1
        self.memory: list[tuple[int, int]] = []
        self.reserved: list[tuple[int, int]] = []
        self.memory_kind = "rss"
        self._last_line = 0.0
        self._line_shown = False
        self._rss = Rss()

    def on_forward(self, module: Any, args: tuple, output: Any) -> None:
        session = self.session
        if not session.sampled or self._loss_step == session.step:
            return
        if type(module).__name__.endswith("Loss"):
            self._record(output)
        elif session.depth == 0:
            self._record(output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None))

    def on_step(self, optimizer: Any) -> None:
        if self.session.sampled and self._loss_step != self.session.step:
            self._record(_loss_in_frames(sys._getframe(1)))

    def _record(self, value: Any) -> None:
        if getattr(value, "ndim", None) == 0 and value.is_floating_point():
            self._loss_step = self.session.step
            self._loss_steps.append(self.session.step)
            self._loss_values.append(value.detach())

    def on_step_end(self, step: int) -> None:
        if self.session.sampled:  # a /proc read on every step is a visible share of a tiny step
            self._read_memory(step)
        session = self.session
        if not session.live:
            return
        now = time.perf_counter()
        if now - self._last_line >= LINE_EVERY_S and _is_tty(session.stream):
            self._last_line = now
            self._line_shown = True
            print(f"\rtorchpact: step {step + 1}, {len(session.findings)} finding(s) so far",
                  end="", file=session.stream, flush=True)

    def _read_memory(self, step: int) -> None:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            self.memory_kind = "cuda_allocated"
            self.memory.append((step, int(torch.cuda.memory_allocated())))
            self.reserved.append((step, int(torch.cuda.memory_reserved())))
        else:
            rss = self._rss()
            if rss is not None:
                self.memory.append((step, rss))

    def on_close(self) -> None:
        self._rss.close()
        if self._line_shown:
            print(file=self.session.stream, flush=True)

    def data(self) -> dict[str, Any]:
        losses: list[tuple[int, float]] = []
        if self._loss_values:
            import torch

            with torch.no_grad():
                values = torch.stack([v.float().cpu() for v in self._loss_values]).tolist()
            losses = list(zip(self._loss_steps, values, strict=False))
        times = self.session.step_times if self.session else []
        out: dict[str, Any] = {"step_time": [(i, round(t, 6)) for i, t in enumerate(times)],
                               "loss": losses, "memory": self.memory, "memory_kind": self.memory_kind}
        if self.reserved:
            out["memory_reserved"] = self.reserved
        return out


def _loss_in_frames(frame: Any, depth: int = 40) -> Any:
    """A 0-d floating tensor named like a loss in ``frame`` or its callers, or Lightning's closure result."""
    import torch

    while frame is not None and depth > 0:
        for name, value in list(frame.f_locals.items()):
            if isinstance(value, torch.Tensor):
                if "loss" in name.lower() and value.ndim == 0 and value.is_floating_point():
                    return value
            elif type(value).__name__ == "Closure":  # lightning's automatic optimization: its last result
                result = getattr(value, "_result", None)
                loss = getattr(result, "loss", None)
                if isinstance(loss, torch.Tensor) and loss.ndim == 0:
                    return loss
        frame, depth = frame.f_back, depth - 1
    return None


def _is_tty(stream: Any) -> bool:
    return not os.environ.get("NO_COLOR") and hasattr(stream, "isatty") and stream.isatty() and stream is sys.stderr
