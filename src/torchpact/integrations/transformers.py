"""Hugging Face Transformers: ``Trainer(..., callbacks=[TorchpactCallback()])`` watches the training.

The watchers attach at ``on_train_begin`` and are removed at ``on_train_end``; ``callback.findings``
then holds what they found, and ``report=`` / ``html=`` write the report::

    from torchpact.integrations.transformers import TorchpactCallback

    cb = TorchpactCallback(report="torchpact.json")
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[cb])
    trainer.train()
    print(cb.findings)

The Trainer's optimizer (wrapped by accelerate) steps the torch optimizer inside, so the session's
optimizer hooks count training steps. The Trainer has no event for a failed ``train()``: when it
raises, call ``cb.close()`` (or use the callback as a context manager) to remove the hooks; a
later ``train()`` also closes a session left open.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from torchpact.findings import Finding
from torchpact.integrations._attach import FitCallback


class TorchpactCallback(FitCallback, TrainerCallback):
    """Attach torchpact's watchers for ``Trainer.train``; hand over the findings; write a report when asked."""

    command = "transformers train"

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        world = getattr(args, "world_size", 1) or 1
        self.fit.start(rank=getattr(args, "process_index", 0) if world > 1 else None)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.fit.stop()

    def close(self, error: BaseException | None = None) -> list[Finding]:
        """Remove the hooks now (after a failed ``train()``) and return the findings."""
        return self.fit.stop(error=error)

    def __enter__(self) -> "TorchpactCallback":
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.close(error=exc)
