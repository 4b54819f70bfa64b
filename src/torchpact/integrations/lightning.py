"""PyTorch Lightning: ``Trainer(callbacks=[TorchpactCallback()])`` watches the fit.

The watchers attach when the fit is set up (before ``configure_optimizers``, so that findings about an
optimizer name the line that built it) and are removed when it ends or raises; ``callback.findings``
then holds what they found (``Finding`` objects), and ``report=`` / ``html=`` write the report::

    from torchpact.integrations.lightning import TorchpactCallback

    cb = TorchpactCallback(report="torchpact.json", html="torchpact.html")
    trainer = L.Trainer(max_epochs=3, callbacks=[cb])
    trainer.fit(model, loader)
    for f in cb.findings:
        print(f.code, f.message)

Lightning's automatic optimisation calls the torch optimizer's ``step`` (with a closure), so the
session's optimizer hooks count training steps as in a plain loop. Under a multi-process strategy
each process watches its own rank.
"""

from __future__ import annotations

from typing import Any

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older standalone package
    from pytorch_lightning.callbacks import Callback  # type: ignore[no-redef,assignment,unused-ignore]

from torchpact.integrations._attach import FitCallback


class TorchpactCallback(FitCallback, Callback):
    """Attach torchpact's watchers for ``Trainer.fit``; hand over the findings; write a report when asked."""

    command = "lightning fit"

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        # Before the strategy calls configure_optimizers: the watchers see each optimizer built, so a finding
        # about one points at its line there (Lightning, not the user's code, calls its step()).
        if stage == "fit":
            self._start(trainer)

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if not self.fit.active:  # a Trainer that did not call setup (older versions)
            self._start(trainer)

    def _start(self, trainer: Any) -> None:
        world = getattr(trainer, "world_size", 1) or 1
        self.fit.start(rank=trainer.global_rank if world > 1 else None)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self.fit.stop()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.fit.stop(error=exception)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.fit.active:  # fit left without its end hook (interrupted)
            self.fit.stop()
