"""The base of every runtime watcher, and the metadata of the checks it performs.

A watcher implements any of the callbacks below; the session calls only the ones a watcher
overrides, so an unused callback costs nothing. Callbacks run inside torch's hooks: they must only
observe — no RNG, no change of dtype, device, mode or ``requires_grad``, nothing allocated on the
user's autograd graph — and they must be cheap on steps that are not sampled
(``session.sampled``). A watcher reports with ``self.session.report(...)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from torchpact.checks import Check

if TYPE_CHECKING:  # pragma: no cover
    from torchpact.watch.session import Session

__all__ = ["Check", "Watcher"]  # Check lives in torchpact.checks; watchers import it from here


class Watcher:
    """Base class; subclasses live in ``torchpact/watch/watchers/<name>.py``."""

    name: ClassVar[str] = "watcher"
    checks: ClassVar[tuple[Check, ...]] = ()
    enabled_by_default: ClassVar[bool] = True
    #: Which module calls ``on_forward_pre`` / ``on_forward`` see on steps that are not sampled:
    #: ``"all"``, ``"roots"`` (the outermost calls only: ``session.depth == 1`` before, 0 after) or
    #: ``"none"``. Sampled steps deliver every call. A watcher may change it on itself at run time; it
    #: takes effect from the next step. Narrower is cheaper: every module call of the script pays it.
    unsampled_calls: str = "all"
    #: Whether every check of the watcher needs a default process group (DDP, FSDP, several ranks). Until
    #: one exists it is not called at all (``on_close`` excepted): a single-process run pays nothing for
    #: it. The session looks for one before each step's ``on_step_pre``, after its ``on_step_end`` and at
    #: each outermost module call of a sampled step, so a job that creates its group before step 0's
    #: forward (which every ``Sampler`` samples) loses nothing.
    needs_process_group: ClassVar[bool] = False
    #: Step callbacks (``"on_step_pre"``, ``"on_step"``, ``"on_step_end"``) that do nothing on steps that are
    #: not sampled: the session does not call them there (every step of a tiny model pays each call).
    sampled_only: ClassVar[frozenset[str]] = frozenset()

    def __init__(self) -> None:
        self.session: Session = None  # type: ignore[assignment]

    def attach(self, session: "Session") -> None:
        """Called once before the script runs."""
        self.session = session

    # Callbacks (override what you need) ------------------------------------------------------
    def on_forward_pre(self, module: Any, args: tuple) -> None:
        """Before ``module.forward`` runs (every module, every call)."""

    def on_forward(self, module: Any, args: tuple, output: Any) -> None:
        """After ``module.forward`` returned (``output`` is None when it raised)."""

    def on_step_pre(self, optimizer: Any) -> None:
        """Before ``optimizer.step()``: gradients of this step are complete here."""

    def on_step(self, optimizer: Any) -> None:
        """After ``optimizer.step()``."""

    def on_step_end(self, step: int) -> None:
        """After the primary optimizer stepped: training step ``step`` is over."""

    def on_close(self) -> None:
        """After the script ended (also when it crashed): final analysis; report here."""

    def data(self) -> dict[str, Any]:
        """Plain data for reports (per-step series and the like); JSON-serialisable. Default: none."""
        return {}

    def check(self, code: str) -> Check:
        for c in self.checks:
            if c.code == code:
                return c
        raise KeyError(code)
