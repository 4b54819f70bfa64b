"""A (batch, seq, feature) tensor fed to a sequence module that reads (seq, batch, feature).

``nn.RNN``, ``nn.LSTM``, ``nn.GRU`` and ``nn.MultiheadAttention`` (so every ``nn.Transformer*`` layer)
take time-major input unless built with ``batch_first=True``. Fed a batch-major tensor, an RNN runs
along the batch, carrying its state from one sample to the next, and attention mixes the samples of the
batch; the shapes still fit, so nothing raises (yunjey/pytorch-tutorial#196).

Observed on sampled steps: the 3-D input of each such module built without ``batch_first`` (a
``PackedSequence`` carries its own layout and is left alone), and the target of each loss call of the
same step (``_loss_calls``). The target's first dimension is the batch. A module whose input's first
dimension is that batch while its second is not (and is not 1) reads the batch as time: one vote. A
target whose first dimension is the input's second is a vote for a correct time-major layout. Inputs
whose two first dimensions are equal, and targets that keep the input's first two dimensions in order
(a time-major per-step target ``(seq, batch)``, indistinguishable from a batch-major one by shape), give
no vote. Reported once two sampled steps voted "swapped" and none "time-major".
"""

from __future__ import annotations

import os
import weakref
from typing import Any

from torchpact.findings import Category, Evidence, Severity
from torchpact.watch.frames import user_location
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers._loss_calls import LossCall, LossCalls

VOTES = 2

BATCH_AS_TIME = Check(
    code="TP360",
    category=Category.NUMERICS,
    severity=Severity.WARNING,
    evidence=Evidence.INFERRED,
    summary="A batch-major (batch, seq, feature) tensor is fed to an RNN/LSTM/GRU/attention built without "
            "batch_first=True: it runs along the batch.",
    doc="""## What it does
At runtime, on sampled steps, looks at the 3-D input of every `nn.RNN`, `nn.LSTM`, `nn.GRU` and
`nn.MultiheadAttention` (also inside `nn.Transformer*` layers) built without `batch_first=True`, and at
the target of the loss calls of the same step. It reports a module whose input's first dimension is the
loss target's batch while its second dimension is not, on two sampled steps and never the other way
round. Inputs whose first two dimensions are equal or whose second dimension is 1, `PackedSequence`
inputs, and targets shaped like the input's first two dimensions give no verdict.

## Why is this bad?
Without `batch_first=True` these modules read their input as `(seq, batch, feature)` (torch 2.13's
default, kept for cuDNN). Given `(batch, seq, feature)`, an RNN runs its recurrence across the samples
of the batch — sample 5's output depends on samples 0-4, and the hidden state carries from one sample
to the next — while the real time steps are treated as independent sequences; attention attends across
samples instead of across positions. The shapes still fit, so nothing raises, and the model learns far
worse than it should (yunjey/pytorch-tutorial#196: held-out accuracy 0.39 instead of 0.76).

## How to fix
Build the module with `batch_first=True` (`nn.LSTM(input_size, hidden_size, batch_first=True)`,
`nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)`), or feed it `x.transpose(0, 1)` and read
its output as `(seq, batch, ...)` (`out[-1]` for the last step).""",
)


class _State:
    """Votes about one sequence module."""

    def __init__(self, module: Any, kind: str) -> None:
        self.ref = weakref.ref(module)
        self.kind = kind
        self.swapped = 0
        self.time_major = 0
        self.voted_at = -1
        self.shape: tuple = ()
        self.target: tuple = ()
        self.loss: LossCall | None = None
        self.site: tuple[str | None, int | None] = (None, None)   # the user's line that calls it
        self.done = False


class RnnLayout(Watcher):
    """TP360: the batch fed to a sequence module as its time axis."""

    name = "rnn_layout"
    checks = (BATCH_AS_TIME,)
    unsampled_calls = "none"

    def __init__(self) -> None:
        super().__init__()
        self._kinds: dict[type, str | None] = {}
        self._states: dict[int, _State] = {}
        self._this_step: dict[int, tuple[_State, tuple]] = {}   # module id -> (state, input shape) this step
        self._losses: LossCalls | None = None
        self._classes: tuple = ()

    def attach(self, session: Any) -> None:
        super().attach(session)
        import torch.nn as nn

        self._classes = ((nn.RNNBase, "rnn"), (nn.MultiheadAttention, "attention"))
        self._losses = LossCalls(self, self._loss_call)
        self._losses.install()

    def on_close(self) -> None:
        if self._losses is not None:
            self._losses.remove()

    def on_step_end(self, step: int) -> None:
        if self._this_step:
            self._this_step.clear()

    def _kind(self, module: Any) -> str | None:
        cls = type(module)
        if cls not in self._kinds:
            self._kinds[cls] = next((k for base, k in self._classes if isinstance(module, base)), None)
        return self._kinds[cls]

    def on_forward_pre(self, module: Any, args: tuple) -> None:
        kind = self._kind(module)
        if kind is None:
            self._losses.module_call(module, args)  # type: ignore[union-attr]
            return
        if getattr(module, "batch_first", True) or not args:
            return
        x = args[0]
        shape = getattr(x, "shape", None)  # a PackedSequence has none
        if shape is None or len(shape) != 3:
            return
        state = self._states.get(id(module))
        if state is None or state.ref() is not module:
            state = self._states[id(module)] = _State(module, kind)
        if not state.done:
            self._this_step[id(module)] = (state, tuple(shape))
            if not state.site[0]:
                state.site = user_location(2)

    def _loss_call(self, call: LossCall) -> None:
        target = call.target
        tshape = getattr(target, "shape", None)
        if not self._this_step or tshape is None or len(tshape) == 0:
            return
        batch = tshape[0]
        step = self.session.step
        for state, shape in list(self._this_step.values()):
            first, second = shape[0], shape[1]
            if state.done or first == second or second == 1:
                continue  # the shapes cannot tell
            if batch == second:
                state.time_major += 1
                continue
            if batch != first or (len(tshape) >= 2 and tshape[1] == second):
                continue
            if state.voted_at != step:
                state.voted_at = step
                state.swapped += 1
                state.shape, state.target, state.loss = shape, tuple(tshape), call
            if state.swapped >= VOTES and state.time_major == 0:
                state.done = True
                self._report(state)

    def _report(self, state: _State) -> None:
        module = state.ref()
        if module is None:
            return
        name = self.session.names.module(module)
        cls = type(module).__name__
        b, t, f = state.shape
        call = state.loss
        where = f" at {os.path.basename(call.path)}:{call.line}" if call is not None and call.path else ""
        label = call.label if call is not None else "the loss"
        if state.kind == "rnn":
            reads = (f"reads it as (seq={b}, batch={t}, feature={f}): its recurrence runs across the {b} samples of "
                     "the batch, carrying its state from one sample to the next, and each of the "
                     f"{t} time steps is treated as a separate sequence")
        else:
            reads = (f"reads it as (L={b}, N={t}, E={f}): it attends across the {b} samples of the batch instead of "
                     f"across the {t} positions of each sequence")
        self.session.report(
            BATCH_AS_TIME,
            f"`{name}` ({cls}, batch_first=False) is fed a tensor of shape {list(state.shape)} whose first dimension "
            f"is the batch of the target given to {label}{where} (shape {list(state.target)}): it {reads}",
            subject=name, path=state.site[0], line=state.site[1],
            key=("layout", id(module)), input_shape=list(state.shape), target_shape=list(state.target),
            fix=f"build it with batch_first=True ({cls}(..., batch_first=True)), or feed it x.transpose(0, 1) and read "
                "its output as (seq, batch, ...)")
