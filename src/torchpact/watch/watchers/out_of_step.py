"""Parameters that change outside ``optimizer.step()``: re-initialisation, in-place edits, corruption.

Only parameters that an optimizer holds and has already stepped count: EMA / teacher models are
other modules, BatchNorm running statistics are buffers, and clipping, schedulers and a GradScaler's
skipped step never write into parameters.

Three ways in, from cheapest to most precise:

- ``nn.init.*``, ``Module.apply`` and the tensor methods that overwrite values wholesale (``normal_``, ``uniform_``,
  ``fill_``, ``zero_``, ``copy_``) are wrapped (O(1) per call once training started: a look-up of the tensor's storage
  among the trained parameters, about 2.5 us a call on CPU; training loops call them rarely, an EMA that ``copy_``s
  each tensor once a step pays it per tensor). An initialiser that writes into a trained parameter outside a step, or
  an ``apply(fn)`` that changes the trained parameters of the module, is noted with the user's line and a checksum of
  the values it overwrote. At the next ``step()`` of an optimizer holding that parameter it is judged: values put back
  in the meantime (EMA weights swapped in for validation and restored) are silent; training on from the overwritten
  values is a warning, or info when that optimizer is a new one or its state for the parameter was reset (a deliberate
  re-initialisation: dormant units reset, a new head). A write never followed by a step is silent.
- After each sampled step, a checksum (norm and max) of each optimizer's parameters is kept; the next
  ``step()`` of that optimizer compares it (one ``tolist()``). A mismatch means something else wrote
  into them during that iteration.
- On a mismatch, a write detector (a ``TorchFunctionMode`` that looks only at in-place ops on the
  parameters' storages) is armed for the next iteration, to name the line and the op. Bounds on a
  weight (``clamp_``: WGAN clipping), masks (``mul_``: pruning) and ``load_state_dict`` (rolling back
  to a checkpoint) are changes made on purpose and stay silent.
"""

from __future__ import annotations

import os
import sys
import weakref
from typing import Any, NamedTuple

from torchpact.findings import Category, Severity
from torchpact.userframes import passes_through
from torchpact.watch.frames import user_location
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers._local import local, real_view
from torchpact.watch.watchers._patch import Patch, remove_all

MAX_ARMED = 3   # iterations the write detector may run in one job
_INIT_FUNCTIONS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
                   "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_",
                   "sparse_")
_TENSOR_INITS = ("normal_", "uniform_", "fill_", "zero_", "copy_")
_ON_PURPOSE = ("clamp_", "clamp_min_", "clamp_max_", "clip_", "mul_", "div_", "renorm_", "masked_fill_")
_ON_PURPOSE_CALLERS = ("load_state_dict", "_load_from_state_dict", "update_parameters", "swap_tensors")

CHANGED_OUTSIDE_STEP = Check(
    code="TP456",
    category=Category.TRAINING,
    severity=Severity.WARNING,
    severity_note="`info` when the parameters changed once but the writer did not show again, so its line is "
                  "unknown, and when an initialiser's values were trained on by a new optimizer or with its state "
                  "reset for them (a deliberate re-initialisation)",
    summary="Parameters an optimizer trains are changed outside optimizer.step() (re-initialised or overwritten).",
    doc="""## What it does
At runtime, watches the parameters that an optimizer holds once it has stepped. The contract: trained
weights are changed only by `optimizer.step()`. It reports a parameter trained by at least one step
that an initialiser overwrites in place outside any step — an `nn.init` function, the tensor's own
`normal_` / `uniform_` / `fill_` / `zero_` / `copy_` (also through `.data`), a `model.apply(init_fn)` or a
`reset_parameters()` — when the next step of its optimizer trains from the overwritten values: a
warning, or info when that optimizer is a new one or its state for the parameter was reset (a
deliberate re-initialisation). Values put back before the next step (EMA weights swapped in for
validation and restored) and writes after the last step are not reported. Other writes are seen by a
checksum taken after a step that no longer matches before the next one — then it names the line and
the op that wrote (`mul_`, `.data = ...`) when it can see it. Weight clipping (`clamp_`), pruning masks
(`mul_`) and `load_state_dict` are treated as deliberate and not reported. EMA / teacher models,
BatchNorm buffers, gradient clipping, schedulers and skipped GradScaler steps never count.

## Why is this bad?
In torch 2.13 nothing protects a parameter from in-place writes under `no_grad` or through `.data`:
an initialisation that runs again after training started (a `post_init()`/`apply(_init_weights)` or
`reset_parameters()` called on a trained model, as in transformers#17877) silently throws away
what was learned, and Adam's moment estimates no longer match the weights. The loss jumps back up
and the run looks merely "unstable".

## How to fix
Initialise once, before the optimizer is created; when loading or resizing a model, skip the
initialisation of weights that are already trained (`_is_hf_initialized`, `init_weights=False`).
If the write is deliberate, do it through the optimizer's parameters and reset its state.""",
)


def _storage(t: Any) -> int | None:
    try:
        return t.untyped_storage().data_ptr()
    except Exception:
        return None


def _deliberate_caller() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name in _ON_PURPOSE_CALLERS:
            return True
        frame = frame.f_back
    return False


class OutOfStep(Watcher):
    """TP456: trained parameters written outside ``optimizer.step()``."""

    name = "out_of_step"
    checks = (CHANGED_OUTSIDE_STEP,)

    def __init__(self) -> None:
        super().__init__()
        self._patches: list[Patch] = []
        self._trained: dict[int, tuple[weakref.ref, int]] = {}   # storage ptr -> (param, step first trained)
        self._sums: dict[int, tuple[weakref.ref, list[weakref.ref], Any, int]] = {}
        self._spy: Any = None
        self._armed = 0
        self._spy_hits: list[tuple[str, str | None, int | None, Any]] = []
        self._in_apply = 0
        self._explained: set[int] = set()   # params an nn.init / apply report already covered
        self._arm_after_step: list[Any] = []
        self._unknown: tuple[list[Any], int, int] | None = None   # a change whose writer is being looked for
        self._settled: set[int] = set()     # params whose writer was named (a bug reported, or on purpose)
        self._writes: dict[int, _Write] = {}   # param id -> the first initialiser write since its last step
        self._in_step = False

    def attach(self, session: Any) -> None:
        super().attach(session)
        import torch
        from torch.nn import init

        for name in _INIT_FUNCTIONS:
            if hasattr(init, name):
                self._patches.append(Patch(init, name, self._wrap_init(name)))
        self._patches.append(Patch(torch.nn.Module, "apply", self._wrap_apply))
        for name in _TENSOR_INITS:
            self._patches.append(Patch(torch.Tensor, name, self._wrap_init(name, f"Tensor.{name}")))

    def on_close(self) -> None:
        self._disarm()
        unknown, self._unknown = self._unknown, None
        if unknown is not None and not self._spy_hits:
            self._report_unknown(unknown)
        self._writes.clear()  # never followed by a step: nothing trained on them
        remove_all(self._patches)

    # ------------------------------------------------------------------ direct: nn.init / apply
    def _wrap_init(self, name: str, label: str | None = None) -> Any:
        label = label or f"torch.nn.init.{name}"

        def make(original: Any) -> Any:
            def wrapper(tensor: Any, *args: Any, **kwargs: Any) -> Any:
                if self._trained and not self._in_apply and not self._in_step:
                    entry = self._trained.get(_storage(tensor))
                    if entry is not None:
                        p = entry[0]()
                        if p is not None and id(p) not in self._writes and not _deliberate_caller():
                            self._note_write(p, self._checksum([p]), label, user_location(2))
                return original(tensor, *args, **kwargs)
            return wrapper
        return make

    def _wrap_apply(self, original: Any) -> Any:
        def apply(module: Any, fn: Any) -> Any:
            if self._in_apply or not self._trained or self._in_step or self.session.closed:
                return original(module, fn)
            params = [p for p in module.parameters() if self._is_trained(p)]
            if not params:
                return original(module, fn)
            before = self._checksum(params)
            self._in_apply += 1
            try:
                result = original(module, fn)
            finally:
                self._in_apply -= 1
            what = getattr(fn, "__qualname__", getattr(fn, "__name__", "fn"))
            site = user_location(2)
            n = len(params)
            for i, (p, same) in enumerate(zip(params, self._same(before, self._checksum(params)), strict=True)):
                if not same and id(p) not in self._writes:
                    self._note_write(p, before[[i, n + i]], f"{type(module).__name__}.apply({what})", site)
            return result
        return apply

    def _note_write(self, p: Any, before: Any, what: str, site: tuple[str | None, int | None]) -> None:
        import torch

        holders = [o for o in self.session.optimizers()
                   if any(q is p for group in o.param_groups for q in group["params"])]
        with torch.no_grad():
            had_state = any(bool(o.state.get(p)) for o in holders)
        self._writes[id(p)] = _Write(weakref.ref(p), before, what, site, had_state, {id(o) for o in holders},
                                     self.session.step)

    def _judge_writes(self, optimizer: Any) -> None:
        """The noted initialiser writes into parameters this optimizer is about to step."""
        held = {id(q): q for group in optimizer.param_groups for q in group["params"]}
        found: dict[tuple, list[tuple[Any, bool]]] = {}
        for key in [k for k in self._writes if k in held]:
            write = self._writes.pop(key)
            p = write.param()
            if p is None or p is not held[key]:
                continue
            if self._same(write.before, self._checksum([p]))[0]:
                continue  # put back before training went on (EMA weights swapped in and restored)
            fresh = id(optimizer) not in write.holders or (write.had_state and not optimizer.state.get(p))
            found.setdefault((write.what, write.site, write.step), []).append((p, fresh))
            self._explained.add(id(p))
        for (what, site, step), params in found.items():
            self._report_direct(what, [p for p, _ in params], site, step, fresh=all(f for _, f in params))

    def _is_trained(self, p: Any) -> bool:
        entry = self._trained.get(_storage(p))
        return entry is not None and entry[0]() is p

    # ------------------------------------------------------------------ checksums around steps
    def on_step_pre(self, optimizer: Any) -> None:
        if self._writes:
            self._judge_writes(optimizer)
        self._in_step = True
        spied = self._spy is not None
        if spied:
            self._disarm()
        explained, self._explained = self._explained, set()
        entry = self._sums.pop(id(optimizer), None)
        if entry is None or entry[0]() is not optimizer:
            return
        params = [r() for r in entry[1]]
        if any(p is None for p in params):
            return
        same = self._same(entry[2], self._checksum(params))
        changed = [p for p, s in zip(params, same, strict=True)
                   if not s and id(p) not in explained and id(p) not in self._settled]
        hits, self._spy_hits = self._spy_hits, []
        hits = [h for h in hits if any(p is h[3] for p in changed)]
        unknown, self._unknown = self._unknown, None
        if hits:
            self._settled.update(id(p) for p in changed)  # the writer is known: do not look again
            op, path, line, _ = hits[0]
            if op not in _ON_PURPOSE and op != "on purpose":
                self._report(changed, f"`{op}` at {os.path.basename(path or '?')}:{line}", path, line,
                             unknown[1] if unknown else entry[3])
            return
        if unknown is not None and (spied or not changed):
            self._report_unknown(unknown)  # the writer did not show again, or wrote out of the spy's sight
        if changed and unknown is None:
            if self._armed < MAX_ARMED:
                self._unknown = (changed, entry[3], self.session.step)
                self._arm_after_step = changed  # armed once this step() is over: the step itself writes too
            else:
                self._report_unknown((changed, entry[3], self.session.step))

    def on_step(self, optimizer: Any) -> None:
        import torch

        self._in_step = False
        arming = bool(self._arm_after_step)
        if arming:
            targets, self._arm_after_step = self._arm_after_step, []
            self._arm(targets)
        if not (self.session.sampled or arming):
            return
        params = [p for g in optimizer.param_groups for p in g["params"]]
        step = self.session.step
        for p in params:
            ptr = _storage(p)
            if ptr is not None and (ptr not in self._trained or self._trained[ptr][0]() is not p):
                self._trained[ptr] = (weakref.ref(p), step)
        ids = {id(p) for p in params}
        for key, (_ref, prefs, _, _) in list(self._sums.items()):  # another optimizer moved shared params
            if key != id(optimizer) and any(id(r()) in ids for r in prefs):
                del self._sums[key]
        if not params:
            return
        with torch.no_grad():
            self._sums[id(optimizer)] = (weakref.ref(optimizer), [weakref.ref(p) for p in params],
                                         self._checksum(params), step)

    def _report_unknown(self, unknown: tuple[list[Any], int, int]) -> None:
        params = [p for p in unknown[0] if p is not None]
        if params:
            self._report(params, None, None, None, unknown[1], severity=Severity.INFO, until=unknown[2])

    @staticmethod
    def _checksum(params: list[Any]) -> Any:
        """Each parameter's 2-norm and max, as one vector: two batched ops (a per-parameter ``sum`` was most
        of this watcher's cost on a small model). A re-initialisation, a mask, a copy or an update moves
        the norm; the max also sees a change of sign."""
        import torch

        with torch.no_grad():
            flat = [real_view(local(p)) for p in params]  # complex parameters: max needs real numbers
            full = [t for t in flat if t.numel()]  # the max of nothing is an error; nothing can change there
            maxes = iter(torch._foreach_max(full)) if full else iter(())
            norms = torch._foreach_norm(flat)
            return torch.stack([*norms, *(next(maxes) if t.numel() else n for t, n in zip(flat, norms, strict=True))])

    @staticmethod
    def _same(before: Any, after: Any) -> list[bool]:
        """Per parameter, whether two checksums of the same parameters match (one read of both)."""
        import torch

        old, new = torch.stack([before, after]).tolist()
        # NaN weights stay NaN: a NaN checksum that was NaN before is unchanged
        same = [x == y or (x != x and y != y) for x, y in zip(old, new, strict=True)]
        half = len(same) // 2
        return [n and m for n, m in zip(same[:half], same[half:], strict=True)]

    # ------------------------------------------------------------------ the write detector
    def _arm(self, params: list[Any]) -> None:
        from torch.overrides import TorchFunctionMode

        watcher = self
        targets = {_storage(p): p for p in params}

        class _WriteSpy(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                name = getattr(func, "__name__", "")
                if name == "__set__" and getattr(getattr(func, "__self__", None), "__name__", None) != "data":
                    name = ""  # another attribute set (zero_grad's `p.grad = None`) writes no weight
                if args and (name.endswith("_") and not name.endswith("__") or name == "__set__"):
                    target = targets.get(_storage(args[0])) if hasattr(args[0], "untyped_storage") else None
                    if target is not None and len(watcher._spy_hits) < 8:
                        op = "on purpose" if _deliberate_caller() else (".data = ..." if name == "__set__" else name)
                        watcher._spy_hits.append((op, *user_location(2), target))
                return func(*args, **(kwargs or {}))

        passes_through(_WriteSpy.__torch_function__)
        self._armed += 1
        self._spy = _WriteSpy()
        self._spy.__enter__()

    def _disarm(self) -> None:
        spy, self._spy = self._spy, None
        if spy is not None:
            try:
                spy.__exit__(None, None, None)
            except Exception:  # the script left its own mode on top of ours
                pass

    # ------------------------------------------------------------------ findings
    def _modules(self, params: list[Any]) -> list[str]:
        out: list[str] = []
        for p in params:
            name = self.session.names.param(p)
            module = name.rsplit(".", 1)[0] if "." in name else name
            if module not in out:
                out.append(module)
        return out

    def _report_direct(self, what: str, params: list[Any], site: tuple[str | None, int | None], step: int,
                       fresh: bool) -> None:
        modules = self._modules(params)
        listing = ", ".join(f"`{m}`" for m in modules[:4])
        listing += f" and {len(modules) - 4} more" if len(modules) > 4 else ""
        where = f" at {os.path.basename(site[0])}:{site[1]}" if site[0] else ""
        done = f"{what}{where} overwrote {len(params)} trained parameter(s) of {listing} after {step} optimizer steps"
        if fresh:
            self.session.report(
                CHANGED_OUTSIDE_STEP,
                f"{done}, and a new optimizer (or one whose state for them was reset) trains them from there: "
                "a deliberate re-initialisation? Otherwise what they learned is thrown away",
                subject=modules[0], path=site[0], line=site[1], key=("direct", site), severity=Severity.INFO,
                fix="if the re-initialisation is not meant, initialise once, before the optimizer is created")
            return
        self.session.report(
            CHANGED_OUTSIDE_STEP,
            f"{done}, and training went on from the overwritten values: what they learned is thrown away and "
            "the optimizer's state no longer matches them",
            subject=modules[0], path=site[0], line=site[1], key=("direct", site),
            fix="initialise once, before the optimizer is created; do not re-run the init on a trained model")

    def _report(self, params: list[Any], cause: str | None, path: str | None, line: int | None, since: int,
                severity: Severity | None = None, until: int | None = None) -> None:
        modules = self._modules(params)
        listing = ", ".join(f"`{m}`" for m in modules[:4])
        listing += f" and {len(modules) - 4} more" if len(modules) > 4 else ""
        by = f" by {cause}" if cause else " (the writer did not show again, so its line is unknown)"
        self.session.report(
            CHANGED_OUTSIDE_STEP,
            f"{len(params)} trained parameter(s) of {listing} changed between optimizer steps {since} and "
            f"{self.session.step if until is None else until}{by}: a write outside optimizer.step() throws away "
            "what they learned",
            subject=modules[0], path=path, line=line, severity=severity, key=("sum", cause is None, modules[0]),
            step=until,
            fix="find what writes into the weights during the iteration (re-initialisation, .data edits, "
                "copy_ from another model) and remove it, or do it before the optimizer is created")


class _Write(NamedTuple):
    """An initialiser's write into a trained parameter outside a step, judged at the parameter's next step."""

    param: weakref.ref
    before: Any                 # the checksum of the values it overwrote
    what: str                   # `torch.nn.init.normal_`, `Tensor.copy_`, `Net.apply(Net._init_weights)`
    site: tuple[str | None, int | None]
    had_state: bool             # an optimizer holding it had state for it
    holders: set[int]           # ids of the optimizers that held it
    step: int
