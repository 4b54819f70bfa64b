"""What the optimizers do with the gradients: who is left out, who is frozen, when they step, whether grads are zeroed.

When it reports (live, once the evidence is enough, so a one-off step does not count):

- TP451: a trainable parameter had a ``.grad`` at ``NO_OPTIMIZER_STEPS`` checked steps and is in no
  optimizer that has stepped (the set of optimizers is complete after the first iteration).
- TP452: an optimizer whose parameters are all frozen at ``FROZEN_STEPS`` checked steps; or frozen
  parameters that an optimizer step actually changed (compared right across ``step()``).
  Frozen parameters in an optimizer are otherwise harmless on torch 2.13 — ``step()`` skips every
  parameter whose ``.grad`` is None, and Adam-style state is only created for parameters with a
  gradient — so the common ``requires_grad_(False)`` + ``AdamW(model.parameters())`` stays silent.
- TP404: ``step()`` found no gradient (all None, or all exactly zero) at every checked step of that
  optimizer, ``NO_GRAD_STEPS`` of them (or at least two when the run ends); ``step(closure)``, which
  computes its gradients inside ``step()``, is recognised across the step.
- TP401: between two steps, a gradient was accumulated onto the previous step's ``.grad`` tensor
  without anything zeroing it in between. Seen through the grad tensor's identity and version counter:
  ``zero_grad()`` sets ``.grad`` to None (a new tensor comes next) or zeroes it in place (version +1),
  while autograd's accumulation adds exactly one version. Only when a ``.grad`` tensor survives a step
  (``zero_grad(set_to_none=False)``, or no zeroing) are post-accumulate-grad hooks put on that
  optimizer's parameters, for the sampled steps only, and taken off at the next step.

Cost per sampled step: a pass over each optimizer's parameter list, and a zero check (one batched
``_foreach_norm``) only when the gradients are the same tensors as at the previous step.
"""

from __future__ import annotations

import weakref
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.frames import user_frame, variable_name
from torchpact.watch.watcher import Check
from torchpact.watch.watchers import _sites
from torchpact.watch.watchers._left_out import group_by_kind, group_by_module, optimizer_params
from torchpact.watch.watchers._optimizer_state import GradState, OptimizerState
from torchpact.watch.watchers.fsdp_replaced_params import replaced_by_fully_shard

NO_OPTIMIZER_STEPS = 3
FROZEN_STEPS = 3
NO_GRAD_STEPS = 3
PROBE_WINDOWS = 8        # clean windows after which an optimizer's zeroing is not probed any more
PROBE_MAX_PARAMS = 1024
SNAPSHOT_MAX = 8

NO_ZERO_GRAD = Check(
    code="TP401",
    category=Category.TRAINING,
    severity=Severity.ERROR,
    summary="Gradients accumulate across optimizer steps because they are never zeroed.",
    doc="""## What it does
At runtime, follows the `.grad` tensors of each optimizer's parameters from one `step()` to the
next. When a new gradient is added onto the `.grad` the previous step used, with no
`zero_grad()` (or `p.grad = None`) in between, it reports the optimizer and the parameters.
Gradient accumulation on purpose (`backward()` on every micro-batch, `step()` and `zero_grad()`
every k of them) is not affected: the gradients are zeroed between two steps.

## Why is this bad?
`loss.backward()` *adds* into `.grad` (torch 2.13's AccumulateGrad is an in-place `+=`). Without
zeroing, step k uses the sum of the gradients of all k iterations so far: the effective learning
rate grows with the step count and the update points where the first batches pushed, so training
diverges or stalls. Nothing raises.

## How to fix
Call `optimizer.zero_grad()` once per step, before `loss.backward()` (or right after `step()`); with
several optimizers or extra parameters outside the model, zero the ones each optimizer holds
(`optimizer.zero_grad()` rather than `model.zero_grad()`).""",
)

STEP_WITHOUT_GRAD = Check(
    code="TP404",
    category=Category.TRAINING,
    severity=Severity.ERROR,
    summary="optimizer.step() runs while none of its parameters has a gradient: step() before backward().",
    doc="""## What it does
At runtime, looks at an optimizer's gradients when its `step()` starts. When, at every checked step,
none of them has a `.grad`, or all of them are exactly zero (zeroed in place and not yet filled by
`backward()`), it reports the optimizer and the line of the `step()` call. `step(closure)` (LBFGS),
which runs `backward()` inside `step()`, is recognised and stays silent.

## Why is this bad?
torch 2.13's optimizers skip parameters whose `.grad` is None, so such a `step()` does nothing; with
zeroed gradients it only applies momentum and weight decay. The usual causes are `optimizer.step()`
placed before `loss.backward()`, or `zero_grad()` placed between `backward()` and `step()`: the
gradients of each iteration are thrown away (or applied one iteration late), and the model does not
learn.

## How to fix
Order every iteration as `optimizer.zero_grad()` → forward → `loss.backward()` → `optimizer.step()`.""",
)

NOT_IN_OPTIMIZER = Check(
    code="TP451",
    category=Category.TRAINING,
    severity=Severity.WARNING,
    summary="Parameters get gradients but belong to no optimizer, so they are never updated.",
    doc="""## What it does
After each checked step, looks for parameters of the models the script calls that have
`requires_grad=True` and a `.grad`, but are in none of the optimizers that step. It reports the
largest module whose trainable parameters are all left out, and the line where the optimizer is
created when it can be found.

## Why is this bad?
autograd computes their gradients (time and memory in every backward), but no `step()` ever reads
them: the module keeps its initial weights. Typical causes: the optimizer was created before a new
head was attached (`model.fc = nn.Linear(...)` after `AdamW(model.parameters())`), or it was built
from a part of the model (`model.encoder.parameters()`), or a learnable parameter of the loss module
was forgotten.

## How to fix
Create the optimizer after the model is complete, from all the parameters that should train, or add
the missing ones with `optimizer.add_param_group({"params": ...})`. If they are meant to stay fixed,
call `requires_grad_(False)` on them: backward then skips them.""",
)

FROZEN_IN_OPTIMIZER = Check(
    code="TP452",
    category=Category.TRAINING,
    severity=Severity.WARNING,
    summary="An optimizer holds only frozen parameters, or still changes parameters with requires_grad=False.",
    doc="""## What it does
Looks at the parameters with `requires_grad=False` that an optimizer holds. It reports:

- an optimizer whose parameters are *all* frozen: its `step()` can never update anything;
- frozen parameters that still carry a `.grad` tensor and that `step()` actually changed (their
  values are compared across the step).

Frozen parameters in an optimizer are otherwise not reported: torch 2.13's `step()` skips every
parameter whose `.grad` is None and creates no optimizer state for it, so passing
`model.parameters()` to the optimizer after `backbone.requires_grad_(False)` is harmless.

## Why is this bad?
An optimizer that holds only frozen parameters is almost always a mistake: the module meant to
train was frozen (`model.requires_grad_(False)` instead of `model.backbone.requires_grad_(False)`),
or the optimizer was built from the wrong module. A frozen parameter that keeps a `.grad` (frozen
after training started, with `zero_grad(set_to_none=False)`, or never zeroed) is still updated:
momentum, Adam's moment estimates and weight decay keep moving the "frozen" weights.

## How to fix
Freeze the right module, or build the optimizer from the parameters that train
(`[p for p in model.parameters() if p.requires_grad]`). When freezing during training, also drop
the gradient (`p.grad = None`) and, for a clean state, remove the parameters from the optimizer.""",
)


# ---------------------------------------------------------------------------------------- helpers
def _max_abs(grads: list[Any]) -> list[float]:
    """max |g| of each gradient: one ``_foreach_norm(inf)`` and one read-back per device."""
    import torch

    out = [1.0] * len(grads)
    by_device: dict[Any, list[int]] = {}
    for i, g in enumerate(grads):
        if g.is_sparse or hasattr(g, "to_local"):
            continue
        by_device.setdefault(g.device, []).append(i)
    with torch.no_grad():
        for idx in by_device.values():
            norms = torch._foreach_norm([grads[i] for i in idx], float("inf"))
            for i, v in zip(idx, torch.stack([n.float() for n in norms]).tolist(), strict=True):
                out[i] = v
    return out


def _params(optimizer: Any) -> list[Any]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _listing(names: list[str], limit: int = 4) -> str:
    shown = ", ".join(f"`{n}`" for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


class OptimizerWatcher(_sites.SiteWatcher):
    """TP401, TP404, TP451 and TP452: how optimizers use (or miss) the gradients."""

    name = "optimizer"
    checks = (NO_ZERO_GRAD, STEP_WITHOUT_GRAD, NOT_IN_OPTIMIZER, FROZEN_IN_OPTIMIZER)
    sampled_only = frozenset({"on_step_end"})

    def __init__(self) -> None:
        super().__init__()
        self._opts: dict[int, OptimizerState] = {}
        self._count = 0
        self._outside: dict[int, list[Any]] = {}   # param id -> [weakref, name, steps with grad]
        self._outside_reported: set[int] = set()
        self._cleared: set[Any] = set()           # (check, optimizer index) already reported

    # ------------------------------------------------------------------ callbacks
    def on_step_pre(self, optimizer: Any) -> None:
        try:
            self._step_pre(optimizer)
        except BaseException:
            self._drop_probes()  # the session switches a failing watcher off: leave no hook behind
            raise

    def on_step(self, optimizer: Any) -> None:
        try:
            self._step_post(optimizer)
        except BaseException:
            self._drop_probes()
            raise

    def _drop_probes(self) -> None:
        for state in self._opts.values():
            self._end_probe(state, evaluate=False)

    def _step_pre(self, optimizer: Any) -> None:
        state = self._state(optimizer)
        self._end_probe(state)
        if not self.session.sampled:
            return
        params = _params(optimizer)
        state.param_ids = {id(p) for p in params}
        if state.name is None:
            frame = user_frame()
            state.name = variable_name(frame, optimizer)
            if frame is not None:
                state.call_site = (frame.f_code.co_filename, frame.f_lineno)
                state.function_start = frame.f_code.co_firstlineno
        frozen = [p for p in params if not p.requires_grad]
        if len(frozen) < len(params):
            state.ever_trainable = True
        self._check_frozen(state, params, frozen)
        self._check_grads(state, params)

    def _step_post(self, optimizer: Any) -> None:
        state = self._opts.get(id(optimizer))
        if state is None or state.ref() is not optimizer:
            return
        if state.pending:
            self._confirm_no_grad(state, optimizer)
        if state.snapshots:
            self._confirm_frozen_changed(state)
        if self._next_sampled(optimizer):
            params = _params(optimizer)
            state.post_grads = {id(p): weakref.ref(p.grad) for p in params if p.grad is not None}
            if (state.needs_probe and state.clean_windows < PROBE_WINDOWS
                    and ("zero", state.index) not in self._cleared):
                self._start_probe(state, params)
        elif state.post_grads:
            state.post_grads = {}

    def on_step_end(self, step: int) -> None:
        if self.session.sampled:
            self._check_outside()

    def on_close(self) -> None:
        for state in self._opts.values():
            self._end_probe(state, evaluate=False)
            if (0 < state.checked < NO_GRAD_STEPS and state.without_grad == state.checked >= 2
                    and not self._all_frozen(state)):
                self._report_no_grad(state)
        super().on_close()

    # ------------------------------------------------------------------ bookkeeping
    def _state(self, optimizer: Any) -> OptimizerState:
        state = self._opts.get(id(optimizer))
        if state is None or state.ref() is not optimizer:
            self._count += 1
            state = OptimizerState(ref=weakref.ref(optimizer), index=self._count)
            self._opts[id(optimizer)] = state
        return state

    def _next_sampled(self, optimizer: Any) -> bool:
        """Whether this optimizer's next step is a sampled one."""
        step = self.session.step + 1 if self.session.primary_optimizer() is optimizer else self.session.step
        return self.session.will_sample(step)

    def _all_frozen(self, state: OptimizerState) -> bool:
        return state.all_frozen > 0 and not state.ever_trainable

    # ------------------------------------------------------------------ TP404
    def _check_grads(self, state: OptimizerState, params: list[Any]) -> None:
        grads = [p.grad for p in params if p.grad is not None]
        state.pending = ""
        state.pre_grads = []
        if not grads:
            state.pending = "none"
            return
        post = state.post_grads
        if post:
            survived = sum(1 for p in params if p.grad is not None and id(p) in post and post[id(p)]() is p.grad)
            if survived:
                state.needs_probe = True  # some .grad tensors survive steps: follow how they are zeroed
            if survived < len(grads):
                self._count_step(state, bad=False)  # a backward created new .grad tensors since the last step
                return
        values = _max_abs(grads[:SNAPSHOT_MAX])
        if any(v != 0.0 for v in values) or (len(grads) > SNAPSHOT_MAX and
                                              any(v != 0.0 for v in _max_abs(grads[SNAPSHOT_MAX:]))):
            self._count_step(state, bad=False)
            return
        state.pending = "zero"
        state.pre_grads = [(weakref.ref(g), g._version) for g in grads]

    def _confirm_no_grad(self, state: OptimizerState, optimizer: Any) -> None:
        """A step(closure) computes its gradients inside step(): then this step was fine."""
        params = _params(optimizer)
        if state.pending == "none":
            closure = any(p.grad is not None for p in params)
        else:
            closure = any(ref() is None or ref()._version != version for ref, version in state.pre_grads)
        kind, state.pending, state.pre_grads = state.pending, "", []
        if closure:
            self._count_step(state, bad=False)
            return
        state.kind = kind
        self._count_step(state, bad=True)
        if state.without_grad == state.checked >= NO_GRAD_STEPS and not self._all_frozen(state):
            self._report_no_grad(state)

    def _count_step(self, state: OptimizerState, bad: bool) -> None:
        state.checked += 1
        state.without_grad += bad

    def _report_no_grad(self, state: OptimizerState) -> None:
        opt = state.ref()
        if opt is not None and replaced_by_fully_shard(self.session, opt)[2]:
            return  # TP656 names the cause: the optimizer predates fully_shard()
        n = len(state.param_ids)
        if state.kind == "zero":
            found = f"all the gradients of its {_plural(n, 'parameter')} were exactly zero"
            why = ("they were zeroed in place (zero_grad(set_to_none=False)) and backward() had not run yet, so "
                   "step() only applies momentum and weight decay")
        else:
            found = f"none of its {_plural(n, 'parameter')} had a gradient"
            why = "torch skips parameters whose .grad is None, so the step does nothing"
        path, line = state.call_site
        self.session.report(
            STEP_WITHOUT_GRAD,
            f"{state.label()} stepped while {found}, at every one of the {_plural(state.checked, 'checked step')}: "
            f"step() runs before loss.backward(), or zero_grad() runs between backward() and step(); {why}",
            subject=state.name or (type(opt).__name__ if opt is not None else None), path=path, line=line,
            key=("step", state.index),
            fix="order each iteration as optimizer.zero_grad() -> forward -> loss.backward() -> optimizer.step()")

    # ------------------------------------------------------------------ TP452
    def _check_frozen(self, state: OptimizerState, params: list[Any], frozen: list[Any]) -> None:
        if params and len(frozen) == len(params):
            state.all_frozen += 1
            if state.all_frozen >= FROZEN_STEPS and not state.ever_trainable:
                names = [self.session.names.param(p) for p in params if self.session.names.has_param(p)]
                where = f" ({_listing(names, 3)})" if names else ""
                path, line = state.creation()
                if not line:
                    path, line = state.call_site
                self.session.report(
                    FROZEN_IN_OPTIMIZER,
                    f"every parameter of {state.label()}{where} has requires_grad=False, so its step() never updates "
                    "anything: the module meant to train is frozen, or the optimizer was built from the wrong module",
                    subject=state.name, path=path, line=line,
                    key=("all-frozen", state.index),
                    fix="freeze only what should stay fixed (e.g. model.backbone.requires_grad_(False)), and build the "
                        "optimizer from the parameters that train")
            return
        if ("frozen-changed", state.index) in self._cleared or state.frozen_checks >= PROBE_WINDOWS:
            return
        with_grad = [p for p in frozen if p.grad is not None]
        if with_grad:
            import torch

            state.frozen_checks += 1
            with torch.no_grad():
                state.snapshots = [(weakref.ref(p), p.detach().clone()) for p in with_grad[:SNAPSHOT_MAX]]

    def _confirm_frozen_changed(self, state: OptimizerState) -> None:
        import torch

        snapshots, state.snapshots = state.snapshots, []
        changed = []
        with torch.no_grad():
            for ref, before in snapshots:
                p = ref()
                if p is not None and not p.requires_grad and not torch.equal(p.detach(), before):
                    changed.append(self.session.names.param(p))
        if not changed:
            return
        self._cleared.add(("frozen-changed", state.index))
        path, line = state.call_site
        self.session.report(
            FROZEN_IN_OPTIMIZER,
            f"{_listing(changed)} {'has' if len(changed) == 1 else 'have'} requires_grad=False but still "
            f"{'carries' if len(changed) == 1 else 'carry'} a .grad, and {state.label()}'s step() changed "
            f"{'it' if len(changed) == 1 else 'them'}: torch updates every parameter whose .grad is not None "
            "(momentum, Adam moments and weight decay keep moving the frozen weights)",
            subject=changed[0], path=path, line=line, key=("frozen-changed", state.index),
            fix="when freezing, also drop the gradient (p.grad = None) and remove the parameters from the optimizer; "
                "zero_grad() with the default set_to_none=True also clears it")

    # ------------------------------------------------------------------ TP451
    def _check_outside(self) -> None:
        known: set[int] = set()
        alive = []
        for state in self._opts.values():
            if state.ref() is not None:
                known |= state.param_ids
                alive.append(state)
        if not alive:
            return
        due = []
        for name, p in self.session.names.named_parameters():
            key = id(p)
            if key in known:
                self._outside.pop(key, None)
                continue
            if not p.requires_grad or p.grad is None or key in self._outside_reported:
                continue
            entry = self._outside.get(key)
            if entry is None or entry[0]() is not p:
                entry = self._outside[key] = [weakref.ref(p), name, 0]
            entry[2] += 1
            if entry[2] >= NO_OPTIMIZER_STEPS:
                due.append(p)
        if due:
            # An optimizer that exists but has not stepped yet (a discriminator that starts later) also counts.
            later = optimizer_params()
            due = [p for p in due if id(p) not in later]
        if due:
            self._report_outside(due, alive)

    def _report_outside(self, due: list[Any], alive: list[OptimizerState]) -> None:
        names = self.session.names
        due_ids = {id(p) for p in due}
        self._outside_reported |= due_ids
        opt = alive[0]
        path, line = opt.creation()
        by = "the optimizer" if len(alive) == 1 else f"any of the {len(alive)} optimizers"
        for root in names.root_modules():
            params = list(root.parameters())
            affected = [names.param(p) for p in params if id(p) in due_ids]
            if not affected:
                continue
            others = [names.param(p) for p in params if id(p) not in due_ids]
            due_ids -= {id(p) for p in params}
            for subject, members, modules in group_by_kind(group_by_module(affected, others), root, names):
                subject = subject or type(root).__name__
                if modules:
                    what = (f"{_plural(len(modules), f'`{subject}` module')} ({_listing(modules)}; "
                            f"{_plural(len(members), 'parameter')} in all)")
                    subject = f"{subject} modules"
                else:
                    what = (f"`{subject}` ({_plural(len(members), 'parameter')})" if members != [subject]
                            else f"parameter `{subject}`")
                self.session.report(
                    NOT_IN_OPTIMIZER,
                    f"{what} {'get' if modules else 'gets'} gradients but {'are' if modules else 'is'} not in {by} "
                    f"({', '.join(s.label() for s in alive)}): step() never updates "
                    f"{'them' if modules else 'it'}, so {'they keep' if modules else 'it keeps'} "
                    "initial values — the optimizer was probably created before "
                    f"{'these modules were' if modules else 'this module was'} added, or from a filtered list "
                    "of parameters",
                    subject=subject, path=path if line else None, line=line,
                    fix="create the optimizer after the model is complete, from every parameter that should train, "
                        "or add these with optimizer.add_param_group({'params': ...}); if they should stay fixed, "
                        "call requires_grad_(False) on them (backward then skips them)",
                    parameters=members)

    # ------------------------------------------------------------------ TP401
    def _start_probe(self, state: OptimizerState, params: list[Any]) -> None:
        for p in params[:PROBE_MAX_PARAMS]:
            g = p.grad
            if g is None or not p.requires_grad or g.is_sparse:
                continue
            st = GradState(grad=weakref.ref(g), version=g._version)
            state.probe[id(p)] = (weakref.ref(p), st)
            had_hooks = p._post_accumulate_grad_hooks is not None
            handle = p.register_post_accumulate_grad_hook(self._make_hook(st))
            state.handles.append((weakref.ref(p), handle, had_hooks))

    def _param_name(self, p: Any, frame: Any) -> str:
        """The parameter's name in its model, else the variable that holds it (a learnable loss temperature)."""
        if self.session.names.has_param(p):
            return self.session.names.param(p)
        return variable_name(frame, p) or self.session.names.param(p)

    @staticmethod
    def _make_hook(st: GradState) -> Any:
        def hook(param: Any) -> None:
            try:
                g = param.grad
                last = st.grad() if st.grad is not None else None
                if g is not None and g is last and g._version == st.version + 1:
                    st.untouched += 1
                else:
                    st.zeroed = True
                st.grad = weakref.ref(g) if g is not None else None
                st.version = g._version if g is not None else -1
            except Exception:  # inside the user's backward: never raise
                st.zeroed = True
        return hook

    def _end_probe(self, state: OptimizerState, evaluate: bool = True) -> None:
        if not state.handles:
            return
        for ref, handle, had_hooks in state.handles:
            handle.remove()
            p = ref()
            if p is not None and not had_hooks and not p._post_accumulate_grad_hooks:
                p._post_accumulate_grad_hooks = None  # leave the parameter exactly as it was
        state.handles = []
        probe, state.probe = state.probe, {}
        if not evaluate:
            return
        kept, touched = [], []
        for ref, st in probe.values():
            p = ref()
            if p is None or p.grad is None or st.zeroed or not st.untouched:
                continue
            if st.grad is not None and st.grad() is p.grad:
                kept.append(p)
                if p.grad._version != st.version:  # changed after the last backward: clipped, or zeroed
                    touched.append(p)
        if touched:
            zeroed = {id(p) for p, v in zip(touched, _max_abs([p.grad for p in touched]), strict=True) if v == 0.0}
            kept = [p for p in kept if id(p) not in zeroed]  # zeroed before step(): that is TP404's
        if not kept:
            state.clean_windows += 1
            return
        frame = user_frame()
        names = [self._param_name(p, frame) for p in kept]
        every = len(kept) == len(probe)
        scope = (f"the gradients of all its {_plural(len(kept), 'parameter')}" if every
                 else f"the gradients of {_plural(len(kept), 'parameter')} ({_listing(names)})")
        path, line = (frame.f_code.co_filename, frame.f_lineno) if frame is not None else state.call_site
        self._cleared.add(("zero", state.index))
        self.session.report(
            NO_ZERO_GRAD,
            f"{state.label()}: {scope} were not zeroed since its previous step(): backward() added this "
            "iteration's gradient onto the one already used, so every step applies the sum of all gradients so far",
            subject=state.name or names[0], path=path, line=line, key=("zero", state.index),
            fix=("call optimizer.zero_grad() once per step (before loss.backward() or right after step())" if every
                 else "these parameters are in the optimizer but not zeroed — call optimizer.zero_grad() "
                      "rather than model.zero_grad(), so every parameter the optimizer holds is cleared"),
            parameters=names[:50])
