"""Where NaN / inf first appears: the module whose output (forward) or input gradient (backward) turns non-finite.

Forward (TP351). On recorded steps, every floating tensor that enters or leaves a module is noted with
its version. When the outermost module call returns, the model's output is reduced to its sum (NaN
when a NaN is present, +inf or -inf when only that infinity is). "Bad" means NaN or +inf: -inf alone
is how masks are written (``masked_fill(mask, -inf)``) and log-probabilities of impossible events, so
it is tracked but never reported by itself. Only when the model's output is bad (a NaN that a later
module masks on purpose, e.g. imputed missing values, is fine) are the other tensors reduced, read
with one ``tolist()`` per device and dtype, and a culprit looked for: the first module, in completion
order, with a bad output and no bad input. That one module is then run again on a private copy
(detached parameters, cloned buffers and inputs, no hooks, RNG state saved and restored, the autocast
state of the original call) under a ``TorchDispatchMode`` that names the first aten op whose output
turns bad, with its source line.

With grad enabled the tensors are held until the outermost call returns (autograd keeps most of them
alive anyway, and the re-run needs the inputs), so their reduction waits for a bad output and most
forwards never pay it. A tensor changed in place since it was seen (``out += identity``) is then
unknown and makes no module the culprit, which falls to the enclosing module; the inputs of a module
that overwrites them (``nn.ReLU(inplace=True)`` and the other ``inplace`` modules) are reduced before
it runs. Under no_grad each tensor is reduced when seen (one kernel, no host sync) and only a weak
reference is kept, so no op is searched for.

Backward (TP352). On the same recorded steps, a tensor hook (never a module backward hook, which would
change the graph) is put on every non-leaf tensor that enters or leaves a module; the hook keeps the
gradient (up to ``HOLD_BYTES`` in all; past that, each is reduced to its sum). Every step, in the
optimizer's step pre-hook, one ``_foreach_norm`` over the gradients about to be applied says whether
any is non-finite. Only then are the kept gradients reduced and read; in firing order (backward
order), the first tensor whose gradient is non-finite is the input of the module whose backward
produced it: every gradient downstream of it fired earlier and was finite.
Unlike ``torch.autograd.detect_anomaly`` (which checks backward outputs for NaN only, so a backward
that produces inf is blamed on whichever later op turns inf into NaN), inf counts.

Recorded steps are the sampled ones, the steps after a non-finite gradient, and, on the sampler's
periodic every-Nth steps past its first ones (``Session.periodic``), forwards without grad
(evaluations) only. A training forward's NaN reaches the gradients, which are checked on every step:
on a periodic step it is detected there, arms the steps after it and, when it does not recur, is
reported with the rerun that locates it. Recording a training step costs a small GPT up to 3.5 ms, a third
of all the checks of its sampled steps.

Trade-offs. Module granularity costs a tensor hook per activation on recorded steps, and a reduction
per activation gradient past ``HOLD_BYTES`` (and per tensor of a no-grad forward); an op-level view
would cost one per autograd node. The backward op is not re-run (that would need every module's
inputs and output gradients held through the backward); instead, for modules defined in the user's
code, the calls in ``forward`` whose derivative is infinite at a boundary (sqrt at 0, acos at 1, ...)
are named. A gradient is attributed to the module that consumes the tensor, which is exact unless the
parent also uses that tensor directly (then both are named). On the other steps only the per-step
gradient check runs (on CUDA read one step late, without a sync; on CPU, when the script's own
``clip_grad_norm_`` has just computed the total norm of these very gradients, that number is read
instead); if it finds inf/NaN, every
following step is checked for ``ARMED_STEPS`` steps, and the step is reported without a module
unless a later step locates the cause.
"""

from __future__ import annotations

import math
from typing import Any

from torchpact.watch.watcher import Watcher
from torchpact.watch.watchers._batched import grad_norms, surely_finite
from torchpact.watch.watchers._local import dense_grads
from torchpact.watch.watchers._nonfinite import forward, values
from torchpact.watch.watchers._nonfinite.backward import blame
from torchpact.watch.watchers._nonfinite.checks import BACKWARD, FORWARD
from torchpact.watch.watchers._nonfinite.opsearch import OpSearch
from torchpact.watch.watchers._nonfinite.recorder import Recorder, settle
from torchpact.watch.watchers._nonfinite.report import Reporter
from torchpact.watch.watchers._nonfinite.stepcheck import ClipNorms, Deferred
from torchpact.watch.watchers._patch import Patch, remove_all

ARMED_STEPS = 20          # steps checked in full after a non-finite gradient on an unsampled step
# Activation gradients held unreduced between two optimizer steps; past it, reduced. On CPU each reduction
# is synchronous work on the training thread (~0.1 ms per MB: 4 ms of a small GPT's sampled step at 16 MB);
# 64 MB held until the next forward is small next to the activations that backward just released.
HOLD_BYTES = 64 << 20


class NonFinite(Watcher):
    """Finds the first module whose forward output or backward input gradient turns NaN/inf."""

    name = "nonfinite"
    checks = (FORWARD, BACKWARD)
    unsampled_calls = "roots"   # every call while armed

    def __init__(self) -> None:
        super().__init__()
        self._on = False                      # this outermost forward is recorded
        self._armed_until = -1
        self._armed_at = -1                   # armed during this step: every call delivered from the next
        self._recorder = Recorder(HOLD_BYTES)
        self._stepped = False
        self._forward_bad_this_step = False
        self._recorded = False                       # a forward of this iteration was recorded
        self._bad_update_steps: list[int] = []       # steps whose update applied non-finite gradients
        self._pending: list[Deferred] = []
        self._ops = OpSearch()
        self._reporter: Reporter = None  # type: ignore[assignment]
        self._patches: list[Patch] = []
        self._clip = ClipNorms(lambda: self._recorded)

    def attach(self, session: Any) -> None:
        super().attach(session)
        from torch.nn import utils

        values.bind()
        self._reporter = Reporter(session)
        self._patches.append(Patch(utils, "clip_grad_norm_", self._clip.wrap))

    # -------------------------------------------------------------------------------- forward
    def on_forward_pre(self, module: Any, args: tuple) -> None:
        session = self.session
        if session.depth == 1:
            if not (self._stepped or self._on or session.sampled or self._armed_until > session.step):
                return  # the usual unsampled model call: nothing to record, nothing to reset
            self._begin_outermost()
        if self._on:
            self._recorder.enter(module, args)

    def on_forward(self, module: Any, args: tuple, output: Any) -> None:
        if self._recorder.leave(module, output):
            self._end_outermost()

    def _begin_outermost(self) -> None:
        session = self.session
        if self._stepped:  # a new iteration: the backward of the last one is over
            self._recorder.new_iteration()
            self._stepped = False
            self._forward_bad_this_step = False
            self._recorded = False
        armed = self._armed_at < session.step < self._armed_until
        if session.sampled and session.periodic and not armed:
            # A training forward's NaN reaches the gradients, checked on every step; nothing else would see
            # an evaluation's.
            self._on = not values.torch.is_grad_enabled()
        else:
            self._on = session.sampled or armed
            self._recorded = self._recorded or self._on
        self._recorder.stack.clear()

    def _end_outermost(self) -> None:
        """The outermost call returned: read this forward's reductions once and look for a culprit."""
        recorder = self._recorder
        calls, entries = recorder.calls, recorder.entries
        try:
            if entries:
                recorder.link_backward()
                if forward.output_bad(calls, entries):
                    settle(entries)
                    self._analyse_forward(forward.culprit(calls, entries))
        finally:
            recorder.end_forward()

    def _analyse_forward(self, verdict: forward.Verdict | None) -> None:
        if verdict is None:
            return
        entries = self._recorder.entries
        if verdict.kind == "input":
            if not self._forward_bad_this_step:  # else it is the output of a model called before
                self._reporter.bad_input(verdict.call, entries)
            self._forward_bad_this_step = True
            return
        self._forward_bad_this_step = True
        reporter, call = self._reporter, verdict.call
        if reporter.full(FORWARD.code):
            return
        bad_params = forward.nonfinite_params(call.module, self.session.names)
        if bad_params:
            if self._bad_update_steps:
                reporter.report_unlocated()
                return  # a consequence of the update reported there
            reporter.stale_parameter(call, bad_params[0])
            return
        if not forward.confirmed(call, entries):
            return
        hit = self._ops.find(call, self._recorder.version_at_call)
        reporter.forward(call, entries, hit)

    # -------------------------------------------------------------------------------- step
    def on_step_pre(self, optimizer: Any) -> None:
        torch = values.torch
        if getattr(optimizer, "found_inf", None) is not None:
            return  # a GradScaler-aware optimizer: grads are still scaled and it skips inf steps itself
        if self._pending:
            self._poll()
        params, grads = dense_grads(optimizer)
        clipped = self._clip.take()
        if not params:
            return  # (sharded DTensor gradients are left to the distributed checks)
        if clipped is not None and not self._recorded and self._clip.says_finite(clipped, grads):
            return
        if not self._recorded and not self.session.sampled and surely_finite(grads):
            return  # the usual unsampled step of a small model: no norm per gradient
        # on sampled steps grad_health and gradient_flow read the same norms in this hook
        norms = grad_norms(grads, self.session.shared if self.session.sampled else None)
        step = self.session.step
        if not self._recorded and norms.device.type == "cuda":
            self._pending.append(Deferred(norms, step, params))  # read once ready: no sync per step
            return
        if not self._recorded:
            self._check_pending(Deferred(norms, step, params))  # on CPU: read now, nothing to overlap with
            return
        bad = [p for p, v in zip(params, norms.tolist(), strict=True) if not math.isfinite(v)]
        if not bad:
            return
        bad = [p for p in bad if not bool(torch.isfinite(p.grad).all())]  # a norm can overflow; values cannot
        if not bad:
            return
        self._bad_update_steps.append(step)
        if self._forward_bad_this_step:
            return  # the forward was already non-finite: reported as TP351
        self._analyse_backward(bad)

    def on_step(self, optimizer: Any) -> None:
        self._stepped = True

    def on_step_end(self, step: int) -> None:
        self._stepped = True
        self._poll()
        if step + 1 >= self._armed_until:
            self.unsampled_calls = "roots"

    def on_close(self) -> None:
        remove_all(self._patches)
        self._clip.clipped = None
        for pending in self._pending:
            self._check_pending(pending)
        self._pending.clear()
        if self._reporter is not None:
            self._reporter.report_unlocated()
        # The last iterations' calls hold the script's modules and graph-attached tensors: under DDP the
        # Reducer and its process group would live on into the interpreter's teardown, where
        # ~ProcessGroupGloo can block joining its threads (a rank that never exits).
        self._recorder.clear()

    def _poll(self) -> None:
        while self._pending and self._pending[0].ready():
            self._check_pending(self._pending.pop(0))

    def _check_pending(self, pending: Deferred) -> None:
        got = pending.value()
        if all(math.isfinite(v) for v in got):
            return
        params = [p for p, v in zip(pending.params, got, strict=True) if not math.isfinite(v)]
        if pending.step == self.session.step:  # still this step's gradients: a norm can overflow, values cannot
            torch = values.torch
            params = [p for p in params if p.grad is not None and not bool(torch.isfinite(p.grad).all())]
            if not params:
                return
        if self._armed_until <= self.session.step:
            self._armed_at = self.session.step
        self._armed_until = max(self._armed_until, self.session.step + ARMED_STEPS)
        self.unsampled_calls = "all"
        self._bad_update_steps.append(pending.step)
        self._reporter.note_unlocated(pending.step, [self.session.names.param(p) for p in params])

    # -------------------------------------------------------------------------------- backward
    def _analyse_backward(self, bad_params: list[Any]) -> None:
        if self._reporter.full(BACKWARD.code):
            return
        self._recorder.reduce_held()
        names = self.session.names
        self._reporter.backward(blame(self._recorder.tables()), [names.param(p) for p in bad_params])
