"""Trainable parameters that never get a gradient, or whose gradient is always exactly zero.

What counts as trainable: a parameter of a root model the script calls, with ``requires_grad=True``,
held by an optimizer that steps. Parameters left out of every optimizer on purpose, and frozen ones,
are never looked at.

When it reports: gradients are complete in the optimizer's step pre-hook, so that is where they are
read. TP251 is reported live once a parameter has had no ``.grad`` at ``NO_GRAD_STEPS`` checked
steps of its optimizer (and never had one); TP252 once its gradient was exactly zero at
``ZERO_GRAD_STEPS`` consecutive checked steps. A run too short for that much evidence reports
nothing: a module used only every few steps, or a zero-initialised gate that opens after the first
update, must not be flagged. Findings are grouped by the largest module whose trainable parameters
are all affected, so an unused head is one finding, not one per tensor.

Cost: every step, only the parameters that never had a gradient are looked at (usually none after
the first step); on sampled steps, one pass over the optimizer's parameters and one batched
``_foreach_norm`` per device, read back with a single ``tolist()`` (``_batched.all_zero``). The
cause of TP251 comes from the forward calls of the affected modules only, recorded on sampled steps.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
import weakref
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.frames import user_location
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers._batched import all_zero
from torchpact.watch.watchers._left_out import group_by_module

NO_GRAD_STEPS = 3
ZERO_GRAD_STEPS = 5

NEVER_GETS_GRAD = Check(
    code="TP251",
    category=Category.AUTOGRAD,
    severity=Severity.WARNING,
    summary="A trainable parameter never receives a gradient, so the optimizer never updates it.",
    doc="""## What it does
Watches the parameters of the models the script calls that have `requires_grad=True` and are held by
an optimizer that steps. When one of them still has no `.grad` after several optimizer steps, it
reports the module (the largest one whose trainable parameters are all affected) and, from what the
module's forward calls showed, the cause:

- the module is never called in `forward` (an unused submodule);
- it is only called under `torch.no_grad()` / `torch.inference_mode()`;
- it is called with grad enabled, but its output is cut from the loss: a `.detach()`, an
  `.item()` / `.tolist()` / `.numpy()`, a non-differentiable op (argmax, comparison, integer cast), or
  its output is simply not used in the loss;
- the module is used, but this one parameter is not (or only through `.data` / `.detach()`).

## Why is this bad?
autograd only writes `.grad` for leaves that the loss depends on differentiably. torch 2.13's
optimizers skip a parameter whose `.grad` is `None` (no update, no weight decay, no state), so the
module keeps its initial weights for the whole run, silently: the loss still goes down through the
rest of the model. Under `DistributedDataParallel` the same parameters make the next iteration
raise "Expected to have finished reduction in the prior iteration" unless
`find_unused_parameters=True`.

## How to fix
Use the module in `forward` and remove the `.detach()` / `no_grad` on its path to the loss. If it
is meant to stay fixed, say so: `module.requires_grad_(False)` and leave its parameters out of the
optimizer; if it is dead code, delete it.""",
)

ALWAYS_ZERO_GRAD = Check(
    code="TP252",
    category=Category.AUTOGRAD,
    severity=Severity.WARNING,
    summary="A trainable parameter's gradient is exactly zero at every step: the loss does not depend on it.",
    doc="""## What it does
Reads, on sampled steps, whether every trainable parameter's gradient is exactly zero (one batched
`torch._foreach_norm` per device; a NaN or inf is not zero). When a parameter's gradient is exactly zero at
several consecutive checked steps, it reports the module whose trainable parameters are all affected.

## Why is this bad?
The parameter is on the loss's graph, but nothing flows back to it: ReLUs after it that are all
dead (every pre-activation <= 0, e.g. from a large negative bias or a learning rate that was too
high), its output multiplied by a zero mask or by a zero-initialised gate that never trains, or a
saturated activation. torch 2.13 computes an exact 0 for these; the optimizer then only applies
weight decay, and the layer never learns.

## How to fix
Look at the activations after the module (are they all 0?): lower the learning rate, fix the
initialisation or the mask, or use LeakyReLU / GELU. If the zero is on purpose (e.g. `0 * p.sum()` to
keep DistributedDataParallel from complaining about unused parameters), the warning can be ignored.""",
)


class _Param:
    """What is known about one trainable parameter."""

    def __init__(self, ref: weakref.ref, name: str, owner: weakref.ref | None, root: weakref.ref | None) -> None:
        self.ref = ref
        self.name = name
        self.owner = owner
        self.root = root
        self.missing = 0            # checked steps without .grad, while it never had one
        self.got_grad = False
        self.zero_streak = 0        # consecutive checked steps with an all-zero gradient
        self.zero_since = 0
        self.last_step = -1
        self.reported: set[str] = set()


class _Calls:
    """Forward calls of one module seen on sampled steps."""

    def __init__(self) -> None:
        self.enabled = 0
        self.disabled = 0
        self.output_requires_grad = 0
        self.first_enabled: tuple[str | None, int | None] = (None, None)
        self.first_disabled: tuple[str | None, int | None] = (None, None)
        self.in_checkpoint = False


def _requires_grad(value: Any, depth: int = 0) -> bool:
    """Whether any tensor in a module's output (tensor, sequence, dict, ModelOutput) requires grad."""
    if depth > 3:
        return False
    if getattr(value, "requires_grad", None) is True:
        return True
    if isinstance(value, (tuple, list)):
        return any(_requires_grad(v, depth + 1) for v in value[:16])
    if isinstance(value, dict):
        return any(_requires_grad(v, depth + 1) for v in list(value.values())[:16])
    return False


def _in_reentrant_checkpoint() -> bool:
    """Whether the current forward runs inside torch.utils.checkpoint's no-grad first pass."""
    frame = sys._getframe(2)
    for _ in range(40):
        if frame is None:
            return False
        if frame.f_code.co_filename.endswith(os.path.join("torch", "utils", "checkpoint.py")):
            return True
        frame = frame.f_back
    return False


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _listing(names: list[str], limit: int = 4) -> str:
    shown = ", ".join(f"`{n}`" for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _definition_line(parent: Any, attr: str) -> tuple[str | None, int | None]:
    """The line of ``self.<attr> = ...`` in the ``__init__`` of ``parent``'s class, when it can be found."""
    for cls in type(parent).__mro__:
        init = cls.__dict__.get("__init__")
        if init is None:
            continue
        try:
            lines, start = inspect.getsourcelines(init)
            path = inspect.getsourcefile(init)
        except (OSError, TypeError):
            continue
        code = getattr(init, "__code__", None)
        this = code.co_varnames[0] if code is not None and code.co_argcount else "self"
        pattern = re.compile(rf"\b{re.escape(this)}\.{re.escape(attr)}\s*(:[^=]+)?=(?!=)")
        for offset, text in enumerate(lines):
            if pattern.search(text):
                return path, start + offset
    return None, None


class GradientFlowWatcher(Watcher):
    """TP251 (never a gradient) and TP252 (always an exactly-zero gradient) for trainable parameters."""

    name = "gradient_flow"
    unsampled_calls = "none"
    checks = (NEVER_GETS_GRAD, ALWAYS_ZERO_GRAD)

    def __init__(self) -> None:
        super().__init__()
        self._params: dict[int, _Param] = {}
        self._owners: dict[int, tuple[weakref.ref, weakref.ref, weakref.ref]] = {}  # param -> (param, owner, root)
        self._indexed_roots = 0
        self._never: dict[int, _Param] = {}        # trainable, never had a .grad so far
        self._watch: set[int] = set()              # modules whose forward calls are recorded
        self._calls: dict[int, _Calls] = {}
        # Where a zero gradient comes from: on sampled steps while a model has parameters with an
        # all-zero gradient, whether each of its modules' outputs is all zero (read back at the step).
        self._module_root: dict[int, int] = {}      # module -> id of its root
        self._zero_roots: set[int] = set()
        self._pending: list[tuple[int, Any]] = []
        self._outputs: dict[int, list[int]] = {}    # module -> [calls seen, calls with a nonzero output]
        self._order: dict[int, tuple[int, weakref.ref, tuple[str | None, int | None]]] = {}
        self._forwards = 0
        self._widths: dict[int, int] = {}           # root -> last dimension of its output, when 2-D or more

    # ------------------------------------------------------------------ callbacks
    def on_forward(self, module: Any, args: tuple, output: Any) -> None:
        if not self.session.sampled:
            return
        import torch

        if self.session.depth == 0 and isinstance(output, torch.Tensor) and output.dim() >= 2:
            self._widths[id(module)] = output.shape[-1]

        if self._zero_roots and self._module_root.get(id(module)) in self._zero_roots and torch.is_grad_enabled():
            self._watch_output(module, output)
        if id(module) not in self._watch:
            return

        calls = self._calls.setdefault(id(module), _Calls())
        if torch.is_grad_enabled():
            calls.enabled += 1
            if _requires_grad(output):
                calls.output_requires_grad += 1
            if calls.first_enabled[0] is None:
                calls.first_enabled = user_location(2)
        else:
            calls.disabled += 1
            if calls.first_disabled[0] is None:
                calls.first_disabled = user_location(2)
                calls.in_checkpoint = _in_reentrant_checkpoint()

    def _watch_output(self, module: Any, output: Any) -> None:
        import torch

        if (isinstance(output, torch.Tensor) and output.is_floating_point() and output.numel()
                and len(self._pending) < 100_000):
            with torch.no_grad():
                self._pending.append((id(module), output.detach().any()))
            if id(module) not in self._order:
                self._forwards += 1
                self._order[id(module)] = (self._forwards, weakref.ref(module), user_location(3))

    def _resolve_outputs(self) -> None:
        import torch

        if not self._pending:
            return
        by_device: dict[Any, list[tuple[int, Any]]] = {}
        for key, flag in self._pending:
            by_device.setdefault(flag.device, []).append((key, flag))
        self._pending = []
        for items in by_device.values():
            for (key, _), nonzero in zip(items, torch.stack([f for _, f in items]).tolist(), strict=True):
                seen = self._outputs.setdefault(key, [0, 0])
                seen[0] += 1
                seen[1] += bool(nonzero)

    def _dead_module(self, root_ref: Any) -> Any:
        """The first module (in forward order) of this model whose output was all zero at every checked call."""
        root = root_ref() if root_ref is not None else None
        dead = [(order, ref()) for key, (order, ref, _) in self._order.items()
                if self._outputs.get(key, [0, 1])[0] > 0 and self._outputs[key][1] == 0
                and ref() is not None and ref() is not root and self._module_root.get(key) == id(root)]
        return min(dead, key=lambda d: d[0])[1] if dead else None

    def on_step_pre(self, optimizer: Any) -> None:
        if not self.session.sampled:
            for key, rec in list(self._never.items()):  # cheap: usually empty after the first step
                p = rec.ref()
                if p is None:
                    del self._never[key]
                elif p.grad is not None:
                    rec.got_grad = True
                    del self._never[key]
            return
        self._index_roots()
        step = self.session.step
        with_grad: list[tuple[_Param, Any]] = []
        for group in optimizer.param_groups:
            for p in group["params"]:
                rec = self._record(p)
                if rec is None or not p.requires_grad or rec.last_step == step:
                    continue
                rec.last_step = step
                g = p.grad
                if g is None:
                    if not rec.got_grad:
                        rec.missing += 1
                        self._never[id(p)] = rec
                    continue
                if not rec.got_grad:
                    rec.got_grad = True
                    self._never.pop(id(p), None)
                if g.is_sparse or hasattr(g, "to_local"):  # sparse / DTensor shards: never "all zero" here
                    rec.zero_streak = 0
                    continue
                with_grad.append((rec, g))
        if with_grad:
            zeros = all_zero([g for _, g in with_grad], self.session.cache)
            for (rec, _), zero in zip(with_grad, zeros, strict=True):
                if zero:
                    if rec.zero_streak == 0:
                        rec.zero_since = step
                    rec.zero_streak += 1
                else:
                    rec.zero_streak = 0
        self._resolve_outputs()
        self._update_watch()
        self._report_never()
        self._report_zero()

    # ------------------------------------------------------------------ bookkeeping
    def _index_roots(self) -> None:
        roots = self.session.names.roots
        if len(roots) == self._indexed_roots:
            return
        for ref in roots[self._indexed_roots:]:
            root = ref()
            if root is None:
                continue
            for mod in root.modules():
                self._module_root.setdefault(id(mod), id(root))
                for p in mod._parameters.values():
                    if p is not None and id(p) not in self._owners:
                        self._owners[id(p)] = (weakref.ref(p), weakref.ref(mod), ref)
        self._indexed_roots = len(roots)

    def _record(self, p: Any) -> _Param | None:
        rec = self._params.get(id(p))
        if rec is not None and rec.ref() is p:
            return rec
        names = self.session.names
        if not names.has_param(p):
            return None  # not part of a model the script calls: it cannot be named
        owner = self._owners.get(id(p))
        if owner is not None and owner[0]() is not p:
            owner = None
        rec = _Param(ref=weakref.ref(p), name=names.param(p),
                     owner=owner[1] if owner else None, root=owner[2] if owner else None)
        self._params[id(p)] = rec
        return rec

    def _update_watch(self) -> None:
        watch: set[int] = set()
        zero_roots: set[int] = set()
        for rec in self._params.values():
            if rec.zero_streak > 0 and "TP252" not in rec.reported and rec.root is not None:
                root = rec.root()
                if root is not None:
                    zero_roots.add(id(root))
            if (not rec.got_grad or rec.zero_streak > 0) and not rec.reported:
                owner = rec.owner() if rec.owner is not None else None
                if owner is not None:
                    watch.add(id(owner))
        self._watch = watch
        if not zero_roots:
            self._outputs.clear()
            self._order.clear()
        self._zero_roots = zero_roots

    def _trainable(self, root: weakref.ref | None, *, with_grad: bool) -> list[_Param]:
        return [r for r in self._params.values()
                if r.root is root and r.ref() is not None and r.ref().requires_grad
                and (r.got_grad or not with_grad)]

    def _groups(self, affected: list[_Param], *, with_grad: bool) -> list[tuple[str, list[_Param]]]:
        """Affected parameters grouped by the largest module whose trainable parameters are all affected."""
        out: list[tuple[str, list[_Param]]] = []
        by_root: dict[Any, list[_Param]] = {}
        for rec in affected:
            by_root.setdefault(rec.root, []).append(rec)
        for root_ref, recs in by_root.items():
            names = {r.name for r in recs}
            others = [r.name for r in self._trainable(root_ref, with_grad=with_grad) if r.name not in names]
            by_name = {r.name: r for r in recs}
            for subject, members in group_by_module([r.name for r in recs], others):
                if not subject:  # every trainable parameter of the model
                    root = root_ref() if root_ref is not None else None
                    subject = type(root).__name__ if root is not None else "the model"
                out.append((subject, [by_name[n] for n in members]))
        return out

    # ------------------------------------------------------------------ TP251
    def _report_never(self) -> None:
        due = [r for r in self._never.values()
               if r.missing >= NO_GRAD_STEPS and not r.got_grad and "TP251" not in r.reported
               and r.ref() is not None]
        if not due:
            return
        for subject, members in self._groups(due, with_grad=False):
            for r in members:
                r.reported.add("TP251")
            cause, path, line = self._cause(subject, members)
            steps = max(r.missing for r in members)
            what = (f"`{subject}` ({_plural(len(members), 'trainable parameter')})" if len(members) > 1
                    or members[0].name != subject else f"parameter `{subject}`")
            self.session.report(
                NEVER_GETS_GRAD,
                f"{what} never received a gradient in {_plural(steps, 'checked optimizer step')}: {cause}; "
                "the optimizer skips parameters whose .grad is None, so it keeps its initial values",
                subject=subject, path=path, line=line,
                fix="make its output reach the loss (call it in forward, drop the .detach()/no_grad on the path); "
                    "if it should stay fixed, call .requires_grad_(False) on it and leave it out of the optimizer",
                parameters=[r.name for r in members])

    def _cause(self, subject: str, members: list[_Param]) -> tuple[str, str | None, int | None]:
        owners: list[Any] = []
        for r in members:
            o = r.owner() if r.owner is not None else None
            if o is not None and all(o is not x for x in owners):
                owners.append(o)
        names = self.session.names
        root = members[0].root() if members[0].root is not None else None
        seen = [(o, self._calls[id(o)]) for o in owners if id(o) in self._calls]
        if owners and not seen and all(o is not root for o in owners):
            path, line = self._where_defined(subject, members)
            return "it is never called in forward (an unused submodule)", path, line
        if seen and all(c.enabled == 0 for _, c in seen):
            path, line = seen[0][1].first_disabled
            if seen[0][1].in_checkpoint:
                return ("it runs inside torch.utils.checkpoint(use_reentrant=True) and none of the checkpointed "
                        "inputs requires grad, so the segment is run without grad and never recomputed in "
                        "backward (pass use_reentrant=False, or make the input require grad)"), path, line
            name = names.module(seen[0][0])
            name = subject if name.startswith(subject + ".") else name
            return f"`{name}` is only called under torch.no_grad() / torch.inference_mode()", path, line
        member_ids = {id(r.ref()) for r in members}
        for o, c in seen:
            if any(id(p) not in member_ids and self._got_grad(p) for p in o.parameters()):
                where = f"the model (`{type(o).__name__}`)" if o is root else f"`{names.module(o)}`"
                attr = members[0].name.rsplit(".", 1)[-1]
                path, line = _definition_line(o, attr) if len(members) == 1 else (None, None)
                if path is None:
                    path, line = c.first_enabled
                return (f"{where} is used and its other parameters get gradients, so this one is not used in its "
                        f"forward (or only through .data / .detach())"), path, line

        def called(o: Any) -> str:  # the group's own name reads better than its first leaf's
            name = names.module(o)
            return f"`{subject}`" if name.startswith(subject + ".") else f"`{name}`"

        for o, c in seen:
            if c.enabled and c.output_requires_grad:
                return (f"{called(o)} is called with grad enabled, but its output is cut from the loss: a "
                        ".detach(), .item()/.tolist()/.numpy(), a non-differentiable op, or its output is not used "
                        "in the loss"), *c.first_enabled
        for o, c in seen:
            if c.enabled:
                return (f"{called(o)} is called with grad enabled but its output does not require grad: its "
                        "forward uses these parameters through .detach() / .data or a non-differentiable op"), \
                    *c.first_enabled
        return ("it is not used in forward, or its output does not reach the loss (a .detach(), .item() or "
                "torch.no_grad() on the path)"), None, None

    def _got_grad(self, p: Any) -> bool:
        rec = self._params.get(id(p))
        return rec is not None and rec.ref() is p and rec.got_grad

    def _where_defined(self, subject: str, members: list[_Param]) -> tuple[str | None, int | None]:
        """Where the unused submodule is assigned in its parent's ``__init__``."""
        root = members[0].root() if members[0].root is not None else None
        if root is None:
            return None, None
        modules = {self.session.names.module(m): m for m in root.modules()}
        parts = subject.split(".")
        for i in range(len(parts) - 1, -1, -1):
            attr = parts[i]
            if attr.isdigit():
                continue
            parent = modules.get(".".join(parts[:i])) if i else root
            if parent is None:
                return None, None
            return _definition_line(parent, attr)
        return None, None

    # ------------------------------------------------------------------ TP252
    def _report_zero(self) -> None:
        due = [r for r in self._params.values()
               if r.zero_streak >= ZERO_GRAD_STEPS and "TP252" not in r.reported and r.ref() is not None]
        by_root: dict[Any, list[_Param]] = {}
        for rec in due:
            by_root.setdefault(rec.root, []).append(rec)
        for root_ref, recs in by_root.items():
            for r in recs:
                r.reported.add("TP252")
            groups = self._groups(recs, with_grad=True)
            subjects = [s for s, _ in groups]
            streak = min(r.zero_streak for r in recs)
            since = max(r.zero_since for r in recs)
            zero = (f"the gradients of {_listing(subjects)} ({_plural(len(recs), 'trainable parameter')}) were "
                    f"exactly zero at {_plural(streak, 'checked step')} in a row (since step {since})")
            dead = self._dead_module(root_ref)
            names = self.session.names
            root = root_ref() if root_ref is not None else None
            whole = root is not None and len(recs) == len(self._trainable(root_ref, with_grad=True))
            if whole and self._widths.get(id(root)) == 1:
                subject = subjects[0]
                path, line = self.session.root_call_sites.get(id(root), (None, None))
                message = (f"{zero}: every trainable parameter of the model gets a zero gradient, and its output has "
                           "a single column — cross_entropy over one class is always exactly 0 (the log-softmax of "
                           "a single logit is 0), so the loss is constant and the model learns nothing")
                fix = ("for a binary task keep the one column and use "
                       "F.binary_cross_entropy_with_logits(out.squeeze(1), target.float()) (nn.BCEWithLogitsLoss); "
                       "for C classes give the output C columns")
            elif dead is not None:
                subject = names.module(dead)
                path, line = self._order[id(dead)][2]
                message = (f"the output of `{subject}` ({type(dead).__name__}) was exactly 0 at every checked forward, "
                           f"so no gradient flows back through it: {zero}; only weight decay changes them")
                fix = (f"`{subject}` is dead (e.g. ReLU units whose pre-activations are all <= 0: a large negative "
                       "bias, a bad initialisation or a learning rate that was too high): fix the layer before it, "
                       "lower the learning rate, or use LeakyReLU/GELU")
            else:
                subject = subjects[0]
                owner = recs[0].owner() if recs[0].owner is not None else None
                path, line = self._first_call(owner)
                message = (f"{zero}: the loss does not depend on them — typically the ReLUs after them are all dead "
                           "(every pre-activation <= 0), or their output is multiplied by a zero mask or gate; only "
                           "weight decay changes them")
                fix = ("check the activations after them (all 0?) and the masks on their path: fix the bias, "
                       "initialisation or mask, lower the learning rate, or use LeakyReLU/GELU; ignore if the zero "
                       "is on purpose (e.g. `0 * p.sum()` to keep DDP quiet)")
            self.session.report(ALWAYS_ZERO_GRAD, message, subject=subject, path=path, line=line, fix=fix,
                                key=("zero", tuple(subjects)), parameters=[r.name for r in recs])

    def _first_call(self, module: Any) -> tuple[str | None, int | None]:
        calls = self._calls.get(id(module)) if module is not None else None
        return calls.first_enabled if calls is not None else (None, None)
