"""Where NaN / inf first appears: the module whose output (forward) or input gradient (backward) turns non-finite.

This watcher only routes the session's callbacks; the work is done by the parts in ``_nonfinite/``.

Recorded steps (TP351, TP352). On sampled steps every floating tensor that enters or leaves a module is
noted (``recorder``), with a tensor hook on each non-leaf one keeping its gradient. When the model's
output holds NaN or +inf, the first module, in completion order, whose output is bad while its inputs
were not is named (``forward``), and re-run alone to name the op (``opsearch``). When the gradients
about to be applied are non-finite, the first hooked tensor, in backward order, whose gradient is bad
names the module whose backward produced it (``backward``). Unlike ``torch.autograd.detect_anomaly``
(which checks backward outputs for NaN only, so a backward that produces inf is blamed on whichever
later op turns inf into NaN), inf counts. Recording a training step costs a small GPT up to 3.5 ms, a
third of all the checks of its sampled steps.

Every step (``stepcheck``). In the optimizer's step pre-hook one ``_foreach_norm`` over the gradients
about to be applied says whether any is non-finite (on CUDA read one step late, without a sync; on CPU,
when the script's own ``clip_grad_norm_`` has just computed the total norm of these very gradients,
that number is read instead). If it finds inf/NaN, every following step is recorded for
``ARMED_STEPS`` steps.

Unrecorded steps (``capture``, ``replay``). The unsampled steps, and the training forwards of the
sampler's periodic every-Nth steps (``Session.periodic``; their evaluations under no_grad are
recorded), keep only references to each outermost call's inputs, the generator's state and the
gradient reaching its outputs: a few microseconds per model call. When the check finds a non-finite
gradient there (on CPU, before the update), that step's model calls are replayed in recording mode on
private copies (same inputs, parameters and RNG state; buffers, parameters and ``.grad`` untouched), so
the module and op are named from the replay, which says how faithful it was: its outputs and gradients
compared with the step's bit for bit. A replay that cannot be faithful (an input changed in place since,
a sharded model, another device) or that does not reproduce the step claims no module: the finding says
why, and how to rerun to locate it.

Trade-offs. Module granularity costs a tensor hook per activation on recorded steps, and a reduction
per activation gradient past ``HOLD_BYTES`` (and per tensor of a no-grad forward); an op-level view
would cost one per autograd node. The backward op is not re-run; for modules defined in the user's
code, the calls in ``forward`` whose derivative is infinite at a boundary (sqrt at 0, acos at 1, ...)
are named. A gradient is attributed to the module that consumes the tensor, which is exact unless the
parent also uses that tensor directly (then both are named).
"""

from __future__ import annotations

import math
from typing import Any

from torchpact.watch.watcher import Watcher
from torchpact.watch.watchers._batched import grad_norms, surely_finite
from torchpact.watch.watchers._local import dense_grads
from torchpact.watch.watchers._nonfinite import forward, values
from torchpact.watch.watchers._nonfinite.backward import blame
from torchpact.watch.watchers._nonfinite.capture import Captures
from torchpact.watch.watchers._nonfinite.checks import BACKWARD, FORWARD
from torchpact.watch.watchers._nonfinite.opsearch import OpSearch
from torchpact.watch.watchers._nonfinite.recorder import Recorder, settle
from torchpact.watch.watchers._nonfinite.replay import MAX_REPLAYS, Replay, Unreplayable
from torchpact.watch.watchers._nonfinite.report import Replayed, Reporter
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
        self._captures = Captures()           # the outermost calls of an unrecorded iteration, for a replay
        self._replays = 0

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
            if self._stepped or self._on or session.sampled or self._armed_until > session.step:
                self._begin_outermost()
            if not self._on:  # the usual unsampled model call: kept for a replay, nothing recorded
                if self._replays < MAX_REPLAYS:
                    self._captures.start(module, args)
                return
        if self._on:
            self._recorder.enter(module, args)

    def on_forward(self, module: Any, args: tuple, output: Any) -> None:
        if self._recorder.leave(module, output):
            self._end_outermost()
        elif self._captures.pending is not None and self.session.depth == 0:
            self._captures.end(module, self.session.root_kwargs, output)

    def _begin_outermost(self) -> None:
        session = self.session
        if self._stepped:  # a new iteration: the backward of the last one is over
            self._recorder.new_iteration()
            self._captures.new_iteration()
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
        if verdict.kind == "input":
            # else it is the output of a model called before, or of parameters an earlier update made non-finite
            if not self._forward_bad_this_step and not self._bad_update_steps:
                self._reporter.bad_input(verdict.call, self._recorder.entries)
            self._forward_bad_this_step = True
            return
        self._forward_bad_this_step = True
        if self._reporter.full(FORWARD.code):
            return
        evidence = self._forward_evidence(verdict, self._recorder)
        if evidence is not None and evidence[0] == "stale" and self._bad_update_steps:
            self._reporter.report_unlocated()
            return  # a consequence of the update reported there
        self._report_forward(evidence, None)

    def _forward_evidence(self, verdict: forward.Verdict, recorder: Recorder) -> tuple | None:
        """What the findings of a forward verdict need, taken while the recorder still holds its tensors:
        ("input", call, entries), ("stale", call, parameter name) or ("module", call, entries, op hit)."""
        call, entries = verdict.call, recorder.entries
        if verdict.kind == "input":
            return ("input", call, entries)
        bad_params = forward.nonfinite_params(call.module, self.session.names)
        if bad_params:
            return ("stale", call, bad_params[0])
        if not forward.confirmed(call, entries):
            return None
        return ("module", call, entries, self._ops.find(call, recorder.version_at_call))

    def _report_forward(self, evidence: tuple | None, replayed: Replayed | None) -> None:
        if evidence is None:
            return
        kind, call, *rest = evidence
        if kind == "input":
            self._reporter.bad_input(call, rest[0], replayed)
        elif kind == "stale":
            self._reporter.stale_parameter(call, rest[0], replayed)
        else:
            self._reporter.forward(call, rest[0], rest[1], replayed)

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
        norms = grad_norms(grads, self.session.cache if self.session.sampled else None)
        step = self.session.step
        if not self._recorded and norms.device.type == "cuda":
            self._pending.append(Deferred(norms, step, params))  # read once ready: no sync per step
            return
        if not self._recorded:  # on CPU: read now, nothing to overlap with, and replayed before the update
            bad = self._check_pending(Deferred(norms, step, params))
            if bad:
                self._replay(params, bad)
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
        self._clip.since_step = False

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
        self._captures.clear()

    def _poll(self) -> None:
        while self._pending and self._pending[0].ready():
            self._check_pending(self._pending.pop(0))

    def _check_pending(self, pending: Deferred) -> list[Any]:
        """The parameters whose gradients an unrecorded step's check found non-finite (arming the next steps)."""
        got = pending.value()
        if all(math.isfinite(v) for v in got):
            return []
        params = [p for p, v in zip(pending.params, got, strict=True) if not math.isfinite(v)]
        if pending.step == self.session.step:  # still this step's gradients: a norm can overflow, values cannot
            torch = values.torch
            params = [p for p in params if p.grad is not None and not bool(torch.isfinite(p.grad).all())]
            if not params:
                return []
        if self._armed_until <= self.session.step:
            self._armed_at = self.session.step
        self._armed_until = max(self._armed_until, self.session.step + ARMED_STEPS)
        self.unsampled_calls = "all"
        self._bad_update_steps.append(pending.step)
        if pending.event is not None:
            self._unlocated(pending.step, params, self._reporter.read_late(), "none")
        return params

    def _unlocated(self, step: int, params: list[Any], why: str, replay: str) -> None:
        self._reporter.note_unlocated(step, [self.session.names.param(p) for p in params], why, replay)

    # -------------------------------------------------------------------------------- replay
    def _replay(self, params: list[Any], bad_params: list[Any]) -> None:
        """Replay this unrecorded step's model calls, before the update, and report what the replay shows."""
        step, reporter = self.session.step, self._reporter
        captures = self._captures.of_step()
        replay = Replay(captures, self.session.names, HOLD_BYTES)
        found: list[tuple] = []

        def on_forward(recorder: Recorder) -> bool:
            if not found and forward.output_bad(recorder.calls, recorder.entries):
                settle(recorder.entries)
                verdict = forward.culprit(recorder.calls, recorder.entries)
                evidence = self._forward_evidence(verdict, recorder) if verdict is not None else None
                if evidence is not None:
                    found.append(evidence)
            return False

        try:
            if self._replays >= MAX_REPLAYS:
                raise Unreplayable(f"torchpact replays at most {MAX_REPLAYS} steps per run")
            if self._captures.off is not None or self._captures.overflow:
                raise Unreplayable(self._captures.off or self._captures.too_many())
            if not captures:
                raise Unreplayable("no module was called with grad enabled in it")
            replay.check()
            self._replays += 1
            with self.session.unobserved():
                replay.run(on_forward)
        except Unreplayable as exc:
            self._unlocated(step, bad_params, reporter.not_replayed(str(exc)), "failed")
            return
        except Exception as exc:  # noqa: BLE001 - the script's forward, run again, may fail where torchpact cannot tell
            self._unlocated(step, bad_params, reporter.not_replayed(
                f"running it again raised {type(exc).__name__}: {exc}"), "failed")
            return
        compared, differing = replay.compare(params)
        names = self.session.names
        verified = replay.outputs_compared > 0
        caveats = replay.caveats if verified else [*replay.caveats, reporter.UNCOMPARED]
        replayed = Replayed(calls=len(captures), outputs=verified, exact=not differing if compared else None,
                            differing=[names.param(p) for p in differing], clipped=self._clip.since_step,
                            caveats=caveats)
        if replay.mismatched:  # not the step: what it shows is not about the step
            self._unlocated(step, bad_params, reporter.not_reproduced(replayed, replay.mismatched), "differs")
            return
        if found:
            self._forward_bad_this_step = True
            if found[0][0] != "module" and self._bad_update_steps[:-1]:
                reporter.report_unlocated()
                return  # a consequence of an earlier update, reported there
            self._report_forward(found[0], replayed)
            return
        replay.recorder.reduce_held()
        where = blame(replay.recorder.tables())
        replay_bad = replay.bad_parameters()
        if where.kind == "params" and not replay_bad:
            self._unlocated(step, bad_params, reporter.stayed_finite(replayed, replay.unreplayed_backward,
                                                                     replay.distributed), "finite")
            return
        if where.kind == "outside" and not verified:
            # the gradient reaching the output is the step's, the forward the replay's: only the same if checked
            self._unlocated(step, bad_params, reporter.unchecked(), "unchecked")
            return
        if not reporter.full(BACKWARD.code):
            reporter.backward(where, [names.param(p) for p in replay_bad or bad_params], replayed)

    # -------------------------------------------------------------------------------- backward
    def _analyse_backward(self, bad_params: list[Any]) -> None:
        if self._reporter.full(BACKWARD.code):
            return
        self._recorder.reduce_held()
        names = self.session.names
        self._reporter.backward(blame(self._recorder.tables()), [names.param(p) for p in bad_params])
