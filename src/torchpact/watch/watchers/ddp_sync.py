"""DDP replicas that stop being replicas: gradients, parameters and buffers compared across ranks.

DDP keeps its replicas bitwise equal: it broadcasts rank 0's parameters when it is built, and every
rank then applies the same averaged gradients. So on a check step every rank takes an exact checksum
of each parameter, gradient and buffer of every DDP model (the int64 sum of the tensor's bits: one
kernel per tensor and one read-back), and compares it with its group's first rank. Any difference
is drift, named by parameter, and the cause is told where it is known:

- TP601: the parameters' dtype (or device) is no longer the one DDP was built with — checked when
  the DDP is first called, no cross-rank comparison needed;
- TP602: gradients (or parameters) differ and the DDP's inner module was called directly
  (``ddp.module(x)``) with grad enabled in steps where the DDP itself was not;
- TP652: gradients or parameters differ for another reason (named in the message). Not checked
  for a model stepped after ``no_sync`` forwards or running post-local SGD (a comm hook whose state is
  torch's ``PostLocalSGDState``, whatever function wraps ``post_localSGD_hook``: after
  ``start_localSGD_iter`` it all-reduces within a subgroup only), nor after ``ddp_unused`` found gradients
  DDP did not all-reduce (TP604): replicas then differ on purpose or for a reason already reported;
- TP651: buffers differ across ranks with `broadcast_buffers=False`;
- TP605 (info): BatchNorm layers run under DDP without SyncBatchNorm.

Values travel through the job's store (``ddp_common.Exchange``), never a collective of the
watcher's own. Check steps are the same on every rank (0, 1, 2, 4, 8, 16, 32, then every
``TORCHPACT_SYNC_EVERY`` = 50 optimizer steps, and once more at the end); a rank compares as soon
as its group's first rank has published that step, and never waits for it during training. At the
end it waits for what the first rank has not published yet, however late that rank is (until it
says it is done, or ``TORCHPACT_EXCHANGE_WAIT``): without a collective in backward (``ddp.module``)
the ranks do not run in step, and the verdict must not depend on which one finishes first. Steps
that could still not be compared are reported as such (TP658, info).
"""

from __future__ import annotations

import json
import os
import time
import weakref
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.facts import GradientsNotReduced
from torchpact.watch.frames import user_location
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers.ddp_common import (NOT_COMPARED, Exchange, all_ddps, bit_checksums, differ,
                                                 exchange_wait, group_ranks, is_ddp, listing, model_key, norms,
                                                 not_compared, plural, world)

EARLY_CHECKS = frozenset({0, 1, 2, 4, 8, 16, 32})
MAX_PENDING = 256  # check steps waiting for the group's first rank (~12,000 steps behind at one in 50)
MAX_SCANS = 2

CONVERTED_AFTER_WRAP = Check(
    code="TP601",
    category=Category.DISTRIBUTED,
    severity=Severity.ERROR,
    summary="A DDP model's parameters changed dtype or device after wrapping: its gradients are no longer all-reduced.",
    doc="""## What it does
When a `DistributedDataParallel` model is first called (and on sampled steps after), compares the
dtype and device of its parameters with those DDP recorded when it was built.

## Why is this bad?
DDP hooks its gradient all-reduce onto each parameter's gradient accumulator when it is built. A
dtype conversion (`model.half()`, `model.to(torch.bfloat16)`, `ddp.double()`) or a device move
replaces the parameters' data, and autograd gives each parameter a new accumulator: DDP's hooks stay
on the old ones. On torch 2.13 every backward then runs without a single all-reduce and without an
error or warning; each rank steps with its own gradients and the replicas drift apart.

## How to fix
Convert or move the model first, then wrap it: `model = model.to(device, dtype)` before
`DistributedDataParallel(model, ...)`. For mixed precision use autocast, or DDP's `mixed_precision`.""",
)

FORWARD_BYPASSES_DDP = Check(
    code="TP602",
    category=Category.DISTRIBUTED,
    severity=Severity.ERROR,
    summary="Training forward went through `ddp.module(...)`: gradients differ across ranks and the replicas drift.",
    doc="""## What it does
Records the steps in which a DDP model's inner module is called directly with grad enabled while the
DDP wrapper is not, and compares exact checksums of the gradients (before the optimizer step) and
parameters across ranks. When they differ after such steps, it reports the line of the direct call.

## Why is this bad?
DDP arms its gradient all-reduce in its own `forward`. Through `ddp.module(x)` the backward runs no
collective at all (0 `gloo:all_reduce` per step on torch 2.13): every rank keeps its local gradient,
takes its own optimizer step, and the replicas silently drift apart — data parallelism in name only.

## How to fix
Call the wrapper for training forward passes: `ddp(x)`. To skip the all-reduce on purpose during
gradient accumulation, use `with ddp.no_sync():` around the micro-steps.""",
)

BATCHNORM_WITHOUT_SYNC = Check(
    code="TP605",
    category=Category.DISTRIBUTED,
    severity=Severity.INFO,
    summary="BatchNorm layers run under DDP without SyncBatchNorm: per-rank batch statistics.",
    doc="""## What it does
When a `DistributedDataParallel` model in training mode is first called on more than one rank,
reports its BatchNorm layers that are not `SyncBatchNorm`, with the per-rank batch size.

## Why is this bad?
Each rank normalises its batch with that batch's own statistics, so BatchNorm sees the per-rank
batch, not the global one, which hurts when it is small. The running statistics are not combined
either: with the default `broadcast_buffers=True` DDP overwrites every rank's buffers with rank 0's
at each forward, so evaluation uses statistics estimated from rank 0's batches alone; with
`broadcast_buffers=False` they drift apart between ranks (see TP651).

## How to fix
If per-rank statistics are not wanted: `model = nn.SyncBatchNorm.convert_sync_batchnorm(model)`
before wrapping (GPU modules only in torch 2.13). Per-rank BatchNorm can also be a deliberate choice
(large per-rank batches); then this note can be ignored.""",
)

BUFFERS_DIVERGE = Check(
    code="TP651",
    category=Category.DISTRIBUTED,
    severity=Severity.WARNING,
    summary="A DDP model's buffers (e.g. BatchNorm running statistics) differ across ranks.",
    doc="""## What it does
With `broadcast_buffers=False`, compares exact checksums of the DDP model's buffers across ranks on
check steps and names those that differ.

## Why is this bad?
Buffers are not gradients: DDP never averages them. Without the per-forward broadcast each rank
keeps its own, so BatchNorm running statistics (or any buffer a rank updates itself) drift apart:
evaluation gives different results on each rank, and a checkpoint saved on rank 0 holds rank 0's
statistics only.

## How to fix
Keep `broadcast_buffers=True` (rank 0's buffers are copied at each forward), use SyncBatchNorm on
GPU, or average the buffers yourself before evaluating or saving (`dist.all_reduce(buf);
buf /= world_size`).""",
)

REPLICAS_DIVERGE = Check(
    code="TP652",
    category=Category.DISTRIBUTED,
    severity=Severity.WARNING,
    summary="A DDP model's gradients or parameters differ across ranks: the replicas are drifting apart.",
    doc="""## What it does
Compares exact checksums (the sum of each tensor's bits) of a DDP model's gradients, taken before
the optimizer step, and of its parameters after it, across the ranks of the DDP's group on check
steps, and names the first tensors that differ, with their norms here and on the group's first rank.

## Why is this bad?
DDP's replicas are bitwise equal by construction: same initial parameters (broadcast when DDP is
built), same averaged gradients, same optimizer math. Gradients that differ after backward mean
something bypassed or undid the all-reduce (a forward outside the wrapper, gradients changed on some
ranks after backward, parameters replaced after wrapping). Parameters that differ while gradients
agree mean they were changed on some ranks only (a checkpoint loaded on rank 0 after wrapping, an
edit under a rank condition, per-rank optimizer settings). DDP never re-broadcasts parameters, so the
ranks now train different models and the checkpoint of rank 0 is only one of them.

## How to fix
Load checkpoints and change parameters before wrapping in DDP (or on every rank); call the DDP
wrapper for training forwards; change gradients only identically on every rank.""",
)

_C10_DTYPE = {"float32": "float", "float64": "double", "float16": "c10::Half", "bfloat16": "c10::BFloat16"}


def _c10_name(dtype: Any) -> str | None:
    return _C10_DTYPE.get(str(dtype).replace("torch.", ""))


def _every() -> int:
    try:
        return max(1, int(os.environ.get("TORCHPACT_SYNC_EVERY", "50")))
    except ValueError:
        return 50


def _post_local_sgd(ddp: Any) -> bool:
    """Whether ``ddp`` runs post-local SGD: a comm hook registered with torch's ``PostLocalSGDState`` (the state
    ``post_localSGD_hook`` needs, whatever function wraps that hook), or that hook itself."""
    try:
        from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import (PostLocalSGDState,
                                                                                    post_localSGD_hook)
    except ImportError:  # a torch built without distributed
        return False
    return any(hook is post_localSGD_hook or isinstance(state, PostLocalSGDState)
               for hook, state in getattr(ddp, "_comm_hooks", ()))


class _Model:
    """One DDP model, as every rank of its group knows it."""

    def __init__(self, ref: weakref.ref, inner: weakref.ref, key: str, subject: str, leader: int, group: list[int],
                 broadcast_buffers: bool, site: tuple[str | None, int | None]) -> None:
        self.ref = ref
        self.inner = inner
        self.key = key
        self.subject = subject
        self.leader = leader
        self.group = group
        self.broadcast_buffers = broadcast_buffers
        self.site = site
        self.grads: list[int] | None = None          # bit checksums of the gradients at this step's step pre-hook
        self.grad_norms: list[float] | None = None
        self.bypass_steps = 0
        self.bypass_site: tuple[str | None, int | None] = (None, None)
        self.bypass_first: int | None = None
        self.converted = False
        self.local_steps = False               # an optimizer stepped after a no_sync forward: local SGD, by design
        self.last_synced = True
        self.built_dtypes: set[str] | None = None
        self.reported: set[str] = set()


class DdpSyncWatcher(Watcher):
    """TP601, TP602, TP605, TP651, TP652: DDP replicas compared across ranks."""

    name = "ddp_sync"
    needs_process_group = True
    unsampled_calls = "roots"   # "all" once a DDP model ran
    checks = (CONVERTED_AFTER_WRAP, FORWARD_BYPASSES_DDP, BATCHNORM_WITHOUT_SYNC, BUFFERS_DIVERGE, REPLICAS_DIVERGE,
              NOT_COMPARED)

    def __init__(self) -> None:
        super().__init__()
        self._models: dict[int, _Model] = {}
        self._by_inner: dict[int, _Model] = {}
        self._keys: dict[str, int] = {}
        self._called: set[int] = set()                  # DDPs called with grad enabled in this step
        self._roots: dict[int, tuple[weakref.ref, tuple]] = {}  # other grad-enabled roots in this step
        self._scans = 0
        self._unwrapped: set[int] = set()               # roots known not to be the inner module of a DDP
        self._grads_step = -1
        self._pending: list[tuple[_Model, str, int, dict, bool]] = []
        self._unsent: list[tuple[str, str]] = []        # the leader's values the store did not take yet
        self._dropped: dict[str, int] = {}              # model key -> check steps dropped beyond MAX_PENDING
        self._every = _every()
        self._last_check = -1
        # Direct calls of inner modules matter only with several ranks (torchrun sets WORLD_SIZE).
        self._multi = os.environ.get("WORLD_SIZE", "1") not in ("", "0", "1")

    # ------------------------------------------------------------------ callbacks
    def on_forward_pre(self, module: Any, args: tuple) -> None:
        if is_ddp(module):
            import torch

            model = self._models.get(id(module))
            if model is None or model.ref() is not module:
                model = self._register(module, user_location(2))
                self.unsampled_calls = "all"  # a DDP may be called inside another module
                self._inspect(model, module, args, first=True)
            elif self.session.sampled:
                self._inspect(model, module, args, first=False)
            if torch.is_grad_enabled():
                self._called.add(id(module))
                model.last_synced = bool(module.require_backward_grad_sync)
        elif self._multi and self.session.depth == 1 and id(module) not in self._roots:
            import torch

            if torch.is_grad_enabled():
                self._roots[id(module)] = (weakref.ref(module), user_location(2))

    def on_step_pre(self, optimizer: Any) -> None:
        step = self.session.step
        if self._grads_step == step or not self._models:
            return
        for model in self._models.values():
            if not model.last_synced:
                model.local_steps = True
        if not self._is_check(step):
            return
        self._grads_step = step  # the first optimizer of the step sees the complete gradients
        for model in self._models.values():
            ddp = model.ref()
            if ddp is None:
                continue
            grads = [p.grad for _, p in ddp.module.named_parameters()]
            model.grads = bit_checksums(grads)
            model.grad_norms = norms(grads)

    def on_step_end(self, step: int) -> None:
        where = world()
        self._multi = where is not None and where[1] > 1
        self._note_bypass(step)
        if not self._is_check(step):
            return
        self._last_check = step
        self._publish(str(step), step)
        self._resolve(final=False)

    def on_close(self) -> None:
        if self._models and self.session.step and self._last_check != self.session.step - 1:
            self._publish("final", self.session.step)
        exchange = Exchange.get()
        if exchange is not None:
            for key, value in self._unsent:
                exchange.put(key, value)
            self._unsent = []
            exchange.close(self.name)  # published all it will: the ranks waiting for it may stop
        self._resolve(final=True)

    # ------------------------------------------------------------------ models
    def _is_check(self, step: int) -> bool:
        return step in EARLY_CHECKS or step % self._every == 0

    def _register(self, ddp: Any, site: tuple[str | None, int | None]) -> _Model:
        group = group_ranks(ddp)
        base = model_key(ddp)
        ordinal = self._keys.get(base, 0)
        self._keys[base] = ordinal + 1
        model = _Model(ref=weakref.ref(ddp), inner=weakref.ref(ddp.module), key=f"{base}-{ordinal}",
                       subject=type(ddp.module).__name__, leader=group[0] if group else -1, group=group,
                       broadcast_buffers=bool(getattr(ddp, "broadcast_buffers", True)), site=site)
        self._models[id(ddp)] = model
        self._by_inner[id(ddp.module)] = model
        return model

    def _inspect(self, model: _Model, ddp: Any, args: tuple, *, first: bool) -> None:
        if len(model.group) < 2:
            return  # one rank: nothing to all-reduce, nothing to share
        if not model.converted:
            self._check_conversion(model, ddp)
        if first and ddp.training:
            self._check_batchnorm(model, ddp, args)

    def _check_conversion(self, model: _Model, ddp: Any) -> None:
        if getattr(ddp, "mixed_precision", None) is not None:
            return  # DDP's own mixed precision swaps the parameters' dtype around forward and backward
        if model.built_dtypes is None:
            try:
                logged = ddp._get_ddp_logging_data().get("dtypes", "")
            except Exception:  # DDP built without its C++ logger
                logged = ""
            model.built_dtypes = {d.strip() for d in str(logged).split(",") if d.strip()}
        built = model.built_dtypes
        params = list(ddp.module.parameters())
        trainable = [p for p in params if p.requires_grad]
        now_all = {_c10_name(p.dtype) for p in params}
        now_trainable = {_c10_name(p.dtype) for p in trainable}
        what = None
        if built and None not in now_all and now_all != built and now_trainable != built:
            c10 = {v: k for k, v in _C10_DTYPE.items()}
            before = ", ".join(sorted(c10.get(d, d) for d in built))
            after = ", ".join(sorted(c10.get(d, d) for d in now_all))
            what = f"converted from {before} to {after}"
        device = getattr(ddp, "device", None)
        if what is None and device is not None and trainable and not getattr(ddp, "is_multi_device_module", False):
            moved = sorted({str(p.device) for p in trainable if p.device != device})
            if moved:
                what = f"moved from {device} to {', '.join(moved)}"
        if what is None:
            return
        model.converted = True
        self.session.report(
            CONVERTED_AFTER_WRAP,
            f"the parameters of this DDP model were {what} after it was wrapped: DDP's gradient all-reduce hooks "
            "stay on the old gradient accumulators, so backward all-reduces nothing, every rank steps with its own "
            "gradients and the replicas drift apart (no error, no warning)",
            subject=model.subject, path=model.site[0], line=model.site[1],
            fix="convert or move the model before wrapping it: `model.to(device, dtype)`, then "
                "`DistributedDataParallel(model, ...)`; for mixed precision use autocast",
            key=("converted", model.key))

    def _check_batchnorm(self, model: _Model, ddp: Any, args: tuple) -> None:
        import torch.nn as nn

        names = self.session.names
        layers = [m for m in ddp.module.modules()
                  if isinstance(m, nn.modules.batchnorm._BatchNorm) and not isinstance(m, nn.SyncBatchNorm)
                  and m.training]
        if not layers:
            return
        first = args[0] if args else None
        batch = f" (a per-rank batch of {first.shape[0]})" if getattr(first, "ndim", 0) else ""
        running = ("the running statistics are rank 0's alone: DDP copies rank 0's buffers to every rank at each "
                   "forward" if model.broadcast_buffers else
                   "with broadcast_buffers=False each rank keeps its own running statistics, which drift apart")
        layer_names = [names.module(m) for m in layers]
        self.session.report(
            BATCHNORM_WITHOUT_SYNC,
            f"{plural(len(layers), 'BatchNorm layer')} ({listing(layer_names)}) run under DDP on "
            f"{len(model.group)} ranks without SyncBatchNorm: each rank normalises with its own batch's "
            f"statistics{batch}, and {running}",
            subject=layer_names[0], path=model.site[0], line=model.site[1],
            fix="if statistics over the global batch are wanted, convert before wrapping: "
                "`model = nn.SyncBatchNorm.convert_sync_batchnorm(model)` (GPU modules); per-rank BatchNorm can "
                "also be a deliberate choice", key=("batchnorm", model.key), layers=layer_names)

    def _note_bypass(self, step: int) -> None:
        roots, called = self._roots, self._called
        self._roots, self._called = {}, set()
        if not roots:
            return
        for key, (ref, site) in roots.items():
            module = ref()
            if module is None or key in self._unwrapped:
                continue
            model = self._by_inner.get(key)
            if model is None or model.inner() is not module:
                model = self._find_wrapper(module)
            if model is None or id(model.ref()) in called:
                continue
            model.bypass_steps += 1
            if model.bypass_first is None:
                model.bypass_first, model.bypass_site = step, site

    def _find_wrapper(self, module: Any) -> _Model | None:
        """The DDP wrapping a module called directly: every DDP is looked up (a gc pass) at most twice a run."""
        where = world()
        if where is None or where[1] < 2 or self._scans >= MAX_SCANS:
            return None
        if not any(p.requires_grad for p in module.parameters()):
            self._unwrapped.add(id(module))  # a loss module or a frozen model: nothing to synchronise
            return None
        self._scans += 1
        for ddp in all_ddps():
            if id(ddp) not in self._models:
                self._register(ddp, (None, None))
        model = self._by_inner.get(id(module))
        if model is None or model.inner() is not module:
            self._unwrapped.add(id(module))
            return None
        return model

    # ------------------------------------------------------------------ checksums across ranks
    def _publish(self, tag: str, step: int) -> None:
        where = world()
        if where is None:
            return
        rank = where[0]
        exchange = Exchange.get()
        # Without the store (it could not be opened) a follower still keeps its values: the comparison it
        # cannot make is reported at the end (TP658), never dropped; the leader sends what it holds later.
        if exchange is not None:
            self._unsent = [(key, value) for key, value in self._unsent if not exchange.put(key, value)]
        for model in list(self._models.values()):
            ddp = model.ref()
            if ddp is None or len(model.group) < 2 or rank not in model.group:
                continue
            params = [p for _, p in ddp.module.named_parameters()]
            payload = {"step": step, "p": bit_checksums(params), "pn": norms(params),
                       "b": bit_checksums([b for _, b in ddp.module.named_buffers()]),
                       "g": model.grads if self._grads_step == step else None,
                       "gn": model.grad_norms if self._grads_step == step else None}
            key = f"sync/{model.key}/{tag}"
            if rank == model.leader:
                if exchange is None or not exchange.put(key, json.dumps(payload)):
                    self._unsent.append((key, json.dumps(payload)))
            else:
                self._pending.append((model, key, step, payload, tag == "final"))

    def _resolve(self, final: bool) -> None:
        """Compare the pending check steps whose leader's values are there; at the end (``final``), wait for
        the others first, and say which could not be compared."""
        if not self._pending and not (final and self._dropped):
            return
        exchange = Exchange.get()
        values: dict[str, bytes] = {}
        reasons: dict[int, tuple[str, float]] = {}  # leader -> why its values are missing
        if exchange is None:
            reasons = {item[0].leader: ("gone", 0.0) for item in self._pending}
        elif final:
            for leader in sorted({item[0].leader for item in self._pending}):
                keys = [item[1] for item in self._pending if item[0].leader == leader]
                start = time.monotonic()
                got, reason = exchange.wait_for(keys, [leader], self.name, exchange_wait())
                values.update(got)
                reasons[leader] = (reason, time.monotonic() - start)
        else:
            for item in self._pending:
                ready = exchange.get_ready([item[1]])
                if ready is not None:
                    values[item[1]] = ready[0]
        still = []
        for item in self._pending:
            model, key, step, mine, last = item
            if key not in values:
                still.append(item)
                continue
            try:
                theirs = json.loads(values[key])
            except ValueError:
                continue
            self._compare(model, step, mine, theirs, last)
            seen = exchange.add(f"{key}/n", 1)
            if seen is not None and seen >= len(model.group) - 1:
                exchange.delete(key, f"{key}/n")
        if not final:
            for model, *_ in still[:-MAX_PENDING]:  # the oldest go first: a later step shows lasting drift too
                self._dropped[model.key] = self._dropped.get(model.key, 0) + 1
            self._pending = still[-MAX_PENDING:]
            return
        self._pending = []
        self._report_not_compared(still, reasons)

    def _report_not_compared(self, missing: list[tuple[_Model, str, int, dict, bool]],
                             reasons: dict[int, tuple[str, float]]) -> None:
        steps: dict[str, list[str]] = {}
        for model, _, step, _, last in missing:
            steps.setdefault(model.key, []).append("the end" if last else f"step {step}")
        for model in self._models.values():
            dropped = self._dropped.get(model.key, 0)
            if model.key not in steps and not dropped or model.reported & {"grads", "params"}:
                continue  # all compared, or already found drifting: the steps left out change no verdict
            when = ([plural(dropped, "earlier check step")] if dropped else []) + steps.get(model.key, [])
            if model.key in steps:
                reason, waited = reasons.get(model.leader, ("gone", 0.0))
            else:
                reason, waited = f"rank {model.leader} was more than {MAX_PENDING} check steps behind", 0.0
            shown = ", ".join(when[:6]) + (f" and {len(when) - 6} more" if len(when) > 6 else "")
            not_compared(self.session, self.name, f"the gradients and parameters of `{model.subject}` with rank "
                         f"{model.leader}'s at {shown}", reason, [model.leader], waited, subject=model.subject)

    def _compare(self, model: _Model, step: int, mine: dict, theirs: dict, final: bool) -> None:
        ddp = model.ref()
        if ddp is None or theirs.get("step") != step or model.converted or model.local_steps:
            return
        if _post_local_sgd(ddp):
            return  # the replicas differ between averaging periods by design
        if any(fact.ddp() is ddp for fact in self.session.facts.of(GradientsNotReduced)):
            return  # DDP skipped the all-reduce for unused parameters: TP604 already says why
        pnames = [n for n, _ in ddp.module.named_parameters()]
        bnames = [n for n, _ in ddp.module.named_buffers()]
        if len(pnames) != len(mine["p"]) or len(mine["p"]) != len(theirs["p"]):
            return
        leader = model.leader
        p_diff = [i for i, (a, b) in enumerate(zip(mine["p"], theirs["p"], strict=True)) if a != b]
        # Gradients count where both ranks have one this step (a model not trained this step has none); a rank
        # whose list is shorter (it read fewer) leaves the rest uncompared.
        both = ([i for i, (a, b) in enumerate(zip(mine["g"], theirs["g"], strict=False))
                 if a is not None and b is not None]
                if mine.get("g") is not None and theirs.get("g") is not None else [])
        g_diff = [i for i in both if mine["g"][i] != theirs["g"][i]]
        b_diff = ([i for i, (a, b) in enumerate(zip(mine["b"], theirs["b"], strict=True)) if a != b]
                  if len(mine["b"]) == len(theirs["b"]) == len(bnames) else [])

        def detail(idx: list[int], names: list[str], key: str) -> str:
            shown = []
            for i in idx[:3]:
                a, b = mine[key][i], theirs[key][i]
                shown.append(f"`{names[i]}` (norm {a:.6g} here, {b:.6g} on rank {leader})")
            more = f" and {len(idx) - 3} more" if len(idx) > 3 else ""
            return ", ".join(shown) + more

        subject = model.subject
        when = "at the end of the run" if final else f"at step {step}"
        grads_known = bool(both)
        if (g_diff or (p_diff and model.bypass_steps)) and "grads" not in model.reported:
            model.reported.add("grads")
            model.reported.add("params")
            if g_diff:
                grads = (f"{when}, the gradients of {plural(len(g_diff), 'parameter')} differ between this rank and "
                         f"rank {leader} after backward: {detail(g_diff, pnames, 'gn')}")
                params = (f"; {differ(len(p_diff), 'parameter')} after the optimizer step" if p_diff else "")
            else:
                grads = (f"{when}, {differ(len(p_diff), 'parameter')} between this rank and rank {leader}: "
                         f"{detail(p_diff, pnames, 'pn')}")
                params = ""
            diverged = [pnames[i] for i in (g_diff or p_diff)]
            if model.bypass_steps:
                path, line = model.bypass_site
                self.session.report(
                    FORWARD_BYPASSES_DDP,
                    f"the training forward called the DDP model's inner module directly (`ddp.module(...)`) in "
                    f"{plural(model.bypass_steps, 'step')} (first at step {model.bypass_first}) without calling the "
                    f"DDP wrapper, so backward all-reduced nothing: {grads}{params}; every rank trains its own replica",
                    subject=subject, path=path, line=line,
                    fix="call the DDP wrapper (`ddp(x)`) for training forwards; use `with ddp.no_sync():` to skip "
                        "the all-reduce on purpose during gradient accumulation",
                    key=("bypass", model.key), parameters=diverged)
            else:
                self.session.report(
                    REPLICAS_DIVERGE,
                    f"{grads}{params}: something bypassed or undid DDP's gradient all-reduce (a forward outside the "
                    "wrapper, a change of the gradients on some ranks after backward, or parameters replaced after "
                    "wrapping), so the replicas drift apart",
                    subject=subject, path=model.site[0], line=model.site[1],
                    fix="call the DDP wrapper for every training forward, change gradients only identically on every "
                        "rank, and convert, move or replace parameters before wrapping",
                    key=("grads", model.key), parameters=diverged)
        elif p_diff and "params" not in model.reported:
            model.reported.add("params")
            agree = " although their gradients agree" if grads_known else ""
            self.session.report(
                REPLICAS_DIVERGE,
                f"{when}, {differ(len(p_diff), 'parameter')} between this rank and rank "
                f"{leader}{agree}: {detail(p_diff, pnames, 'pn')}; they were changed on some ranks only after "
                "wrapping (a checkpoint loaded on one rank, an edit under a rank condition, per-rank optimizer "
                "settings), and DDP never re-broadcasts parameters",
                subject=subject, path=model.site[0], line=model.site[1],
                fix="load checkpoints and change parameters before wrapping in DDP, or do it on every rank; keep the "
                    "optimizer settings identical on every rank",
                key=("params", model.key), parameters=[pnames[i] for i in p_diff])
        if b_diff and not model.broadcast_buffers and "buffers" not in model.reported:
            model.reported.add("buffers")
            names = [bnames[i] for i in b_diff]
            self.session.report(
                BUFFERS_DIVERGE,
                f"{when}, {differ(len(b_diff), 'buffer')} between this rank and rank {leader}: "
                f"{listing(names)}; with broadcast_buffers=False DDP never synchronises buffers, so each rank keeps "
                "its own (BatchNorm running statistics from its own batches): evaluation differs per rank and rank "
                f"{leader}'s checkpoint holds its own statistics only",
                subject=subject, path=model.site[0], line=model.site[1],
                fix="keep broadcast_buffers=True, use SyncBatchNorm (GPU), or average the buffers across ranks "
                    "before evaluating or saving", key=("buffers", model.key), buffers=names)
