"""Progress: per-step time, loss and memory as plain data for reports, and a live progress line.

It reports no finding. The loss is what ``nn.*Loss`` modules return (functional losses are not
seen by module hooks); it is kept as detached 0-d tensors on sampled steps and read once at the
end, so no host-device sync is added during training. Memory is the CUDA allocator's
``memory_allocated`` / ``memory_reserved`` when CUDA is in use (no sync), else the process's
resident set size from /proc/self/statm.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from torchpact.watch.watcher import Watcher

LINE_EVERY_S = 2.0


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class Progress(Watcher):
    """Series of step time, loss and memory; a progress line on a terminal."""

    name = "progress"
    unsampled_calls = "none"

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

    def on_forward(self, module: Any, args: tuple, output: Any) -> None:
        session = self.session
        if not session.sampled or self._loss_step == session.step:
            return
        if type(module).__name__.endswith("Loss") and getattr(output, "ndim", None) == 0:
            self._loss_step = session.step
            self._loss_steps.append(session.step)
            self._loss_values.append(output.detach())

    def on_step_end(self, step: int) -> None:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            self.memory_kind = "cuda_allocated"
            self.memory.append((step, int(torch.cuda.memory_allocated())))
            self.reserved.append((step, int(torch.cuda.memory_reserved())))
        else:
            rss = _rss_bytes()
            if rss is not None:
                self.memory.append((step, rss))
        session = self.session
        now = time.perf_counter()
        if session.live and now - self._last_line >= LINE_EVERY_S and _is_tty(session.stream):
            self._last_line = now
            self._line_shown = True
            print(f"\rtorchpact: step {step + 1}, {len(session.findings)} finding(s) so far",
                  end="", file=session.stream, flush=True)

    def on_close(self) -> None:
        if self._line_shown:
            print(file=self.session.stream, flush=True)

    def data(self) -> dict[str, Any]:
        losses: list[tuple[int, float]] = []
        if self._loss_values:
            import torch

            with torch.no_grad():
                values = torch.stack([v.float().cpu() for v in self._loss_values]).tolist()
            losses = list(zip(self._loss_steps, values))
        times = self.session.step_times if self.session else []
        out: dict[str, Any] = {"step_time": [(i, round(t, 6)) for i, t in enumerate(times)],
                               "loss": losses, "memory": self.memory, "memory_kind": self.memory_kind}
        if self.reserved:
            out["memory_reserved"] = self.reserved
        return out


def _is_tty(stream: Any) -> bool:
    return not os.environ.get("NO_COLOR") and hasattr(stream, "isatty") and stream.isatty() and stream is sys.stderr
