"""Train/eval mode at the moments it matters: an optimizer step, and a forward under no_grad.

Only modules whose output depends on the mode count ("mode-dependent"): Dropout variants with p > 0,
BatchNorm / InstanceNorm that track running statistics, MultiheadAttention and multi-layer RNNs with
dropout, RReLU, and drop-path / stochastic-depth layers. A model without any of them behaves the
same in both modes and is never reported.

- TP402: a model ran its grad-enabled forward with the whole model in eval mode (every submodule
  ``training == False``, as ``model.eval()`` leaves it), and an optimizer that holds its trainable
  parameters then stepped. Evaluating a few layers in eval mode on purpose (frozen BatchNorm) leaves
  the model itself in train mode, and stays silent.
- TP453: a model that an optimizer trains ran a forward under ``torch.no_grad()`` /
  ``torch.inference_mode()`` while in train mode, and that forward was random or changed the model:
  dropout dropped units during it (seen at the dropout calls themselves, ``_dropout_calls``: module,
  functional and attention dropout alike), or it has BatchNorm / InstanceNorm with running statistics,
  RNN dropout, drop-path or RReLU in train mode. Two such forwards between two steps are a validation
  pass; one is enough when dropout dropped units during it: a warning when it came between two steps
  of an optimizer that trains the model (an evaluation during training), info when it came before its
  first step or after its last. Models that no optimizer trains (EMA / teacher / target networks, run
  in train mode on purpose) are not reported. ``torch.optim.swa_utils.update_bn`` and reentrant
  ``torch.utils.checkpoint`` (which run forwards under no_grad in train mode by design) are recognised.

Cost: one depth test per module call; the rest runs only for top-level calls, and the expensive part
(walking the model) only when a model is in the suspicious mode. A dropout call costs a test of
whether a no-grad pass is open.
"""

from __future__ import annotations

import os
import sys
import weakref
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.frames import user_frame, user_location, variable_name
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers import _dropout_calls

EVAL_WHILE_TRAINING = Check(
    code="TP402",
    category=Category.TRAINING,
    severity=Severity.WARNING,
    summary="The optimizer trains a model that is in eval mode: dropout is off and BatchNorm uses running stats.",
    doc="""## What it does
At runtime, notes the mode of each model the script calls with gradients enabled. When a model
whose every submodule is in eval mode (as `model.eval()` leaves it) has mode-dependent layers —
Dropout, BatchNorm / InstanceNorm with running statistics, attention or RNN dropout, drop-path — and
an optimizer holding its trainable parameters steps, it reports the model and names those layers.
Layers put in eval mode on purpose while the model stays in train mode (frozen BatchNorm) are not
reported.

## Why is this bad?
In eval mode torch 2.13's Dropout is the identity and BatchNorm normalises with its running
statistics and stops updating them. Training then has no dropout regularisation and normalises
with stale statistics; the usual cause is `model.eval()` for validation inside the training loop
without `model.train()` afterwards, so every epoch after the first validation trains differently.

## How to fix
Call `model.train()` when training resumes, e.g. at the start of every epoch. To keep BatchNorm
frozen on purpose, put only those layers in eval mode (`m.eval()` for each BatchNorm) and keep the
model in train mode.""",
)

VALIDATION_IN_TRAIN_MODE = Check(
    code="TP453",
    category=Category.TRAINING,
    severity=Severity.WARNING,
    severity_note="`info` for a single no-grad forward with dropout that came before the model's first "
                  "training step or after its last (a sanity check, a final sample), not between two of them",
    summary="A model runs under no_grad (validation) in train mode: dropout is on and BatchNorm learns from it.",
    doc="""## What it does
At runtime, looks at forwards of the trained model (one whose parameters an optimizer holds) that
run under `torch.no_grad()` / `torch.inference_mode()` while the model is in train mode. It reports
the model, the layers and the line of the call when such forwards evaluate a model that behaves
differently in train mode: two of them between two optimizer steps with Dropout, BatchNorm /
InstanceNorm with running statistics, attention or RNN dropout or drop-path in train mode — or a
single one during which dropout actually dropped units (`nn.Dropout`, `F.dropout(x, p,
training=self.training)`, attention dropout): a warning when it came between two training steps of
the model (an evaluation during training), info when it came before the first step or after the
last. EMA / teacher / target networks that no optimizer trains, a model put in eval mode with only its
Dropout layers back in train mode (Monte-Carlo dropout), `swa_utils.update_bn` and reentrant
checkpointing are not reported; a single no-grad forward without dropout (a GAN's progress sample) is
not either.

## Why is this bad?
`no_grad` only turns off gradient tracking; it does not change the mode. In train mode torch 2.13's
Dropout still zeroes activations at random (noisy, pessimistic metrics) and BatchNorm normalises
with the validation batch's statistics *and updates its running statistics from the validation
data*, so evaluating changes the model that training continues with.

## How to fix
`model.eval()` before validating and `model.train()` after. For Monte-Carlo dropout on purpose,
enable only the dropout layers (`m.train()` for each Dropout) after `model.eval()`. If the forward
recomputes BatchNorm statistics on purpose, this warning can be ignored.""",
)

VALIDATION_CALLS = 2  # no-grad forwards of one model between two steps that make a validation pass
_DROP_PATH_NAMES = ("DropPath", "StochasticDepth", "DropBlock2d", "DropBlock3d", "DropBlock")
_NAME_LIMIT = 4
_SEEN_AT_THE_CALL = ("Dropout", "MultiheadAttention")  # kinds whose dropout _dropout_calls sees when it happens


def _mode_kind(m: Any) -> str | None:
    """What a module does differently in train mode, or None when it does the same in both."""
    from torch import nn

    if isinstance(m, nn.modules.dropout._DropoutNd):
        return "Dropout" if m.p > 0 else None
    if isinstance(m, nn.modules.batchnorm._NormBase):
        if not m.track_running_stats:
            return None
        return "InstanceNorm" if isinstance(m, nn.modules.instancenorm._InstanceNorm) else "BatchNorm"
    if isinstance(m, nn.MultiheadAttention):
        return "MultiheadAttention" if m.dropout > 0 else None
    if isinstance(m, nn.RNNBase):
        return type(m).__name__ if m.dropout > 0 and m.num_layers > 1 else None
    if isinstance(m, nn.RReLU):
        return "RReLU"
    if type(m).__name__ in _DROP_PATH_NAMES:
        p = getattr(m, "drop_prob", getattr(m, "p", None))
        return "DropPath" if p is None or (isinstance(p, (int, float)) and p > 0) else None
    return None


_EFFECTS = {  # what each kind does in train mode
    "Dropout": "dropout", "MultiheadAttention": "dropout", "LSTM": "dropout", "GRU": "dropout", "RNN": "dropout",
    "DropPath": "dropout", "BatchNorm": "batch statistics", "InstanceNorm": "batch statistics", "RReLU": "random",
}


def _effects(kinds: set[str], train: bool) -> str:
    effects = {_EFFECTS.get(k, "dropout") for k in kinds}
    out = []
    if "dropout" in effects:
        out.append("dropout zeroes activations at random" if train else "dropout is off")
    if "batch statistics" in effects:
        out.append("BatchNorm normalises with this batch's statistics and overwrites its running statistics with "
                   "them" if train else "BatchNorm normalises with its running statistics and stops updating them")
    if "random" in effects:
        out.append("RReLU draws random slopes" if train else "RReLU uses a fixed slope")
    return ", ".join(out)


def _in_frames(*suffixes: str) -> bool:
    """Whether one of the calling frames is in a torch file ending with one of ``suffixes``."""
    frame = sys._getframe(2)
    for _ in range(60):
        if frame is None:
            return False
        name = frame.f_code.co_filename
        if name.endswith(suffixes):
            return True
        frame = frame.f_back
    return False


def _call_site(obj: Any) -> tuple[str | None, int | None, str | None]:
    """The user's line calling into torch here, and the name that frame holds ``obj`` under."""
    frame = user_frame(2)
    if frame is None:
        return None, None, None
    return frame.f_code.co_filename, frame.f_lineno, variable_name(frame, obj)


def _grad_enabled() -> bool:
    import torch

    global _grad_enabled
    _grad_enabled = torch.is_grad_enabled  # at every model call: bound once torch is in
    return torch.is_grad_enabled()


_EXEMPT = (os.path.join("torch", "optim", "swa_utils.py"), os.path.join("torch", "utils", "checkpoint.py"))


class ModeWatcher(Watcher):
    """TP402 (stepping a model in eval mode) and TP453 (no-grad forward of the trained model in train mode)."""

    name = "mode"
    unsampled_calls = "roots"
    checks = (EVAL_WHILE_TRAINING, VALIDATION_IN_TRAIN_MODE)

    def __init__(self) -> None:
        super().__init__()
        self._kinds: dict[int, tuple[weakref.ref, list[tuple[weakref.ref, str]]]] = {}
        self._eval_forwards: dict[int, tuple[weakref.ref, tuple[str | None, int | None, str | None]]] = {}
        self._no_grad_calls: dict[int, int] = {}   # no-grad forwards in train mode since the last step
        self._reported: set[tuple[str, int]] = set()
        self._pending: dict[int, tuple[tuple[str | None, int | None, str | None], str, str, str, set[int]]] = {}
        self._opt_params: dict[int, tuple[weakref.ref, set[int]]] = {}
        self._pass: _Pass | None = None       # the no-grad forward in train mode running now
        self._dropped: dict[int, set[str]] = {}  # root id -> dropout functions that dropped in its no-grad passes
        self._single: dict[int, tuple] = {}      # one no-grad pass with dropout, decided at the next step or at close
        self._early: dict[int, tuple] = {}       # such a pass before the model's first step: info at close
        self._listening = False

    def attach(self, session: Any) -> None:
        super().attach(session)
        _dropout_calls.subscribe(self._heard)
        self._listening = True

    # ------------------------------------------------------------------ callbacks
    def on_forward_pre(self, module: Any, args: tuple) -> None:
        if self.session.depth != 1:
            return
        key = id(module)
        self._pass = None  # (one left open by a forward whose end was not seen)
        if _grad_enabled():
            if module.training:
                if self._eval_forwards:
                    self._eval_forwards.pop(key, None)  # the last training forward is in train mode
            elif ("TP402", key) not in self._reported:
                seen = self._eval_forwards.get(key)
                if seen is None:
                    self._eval_forwards[key] = (weakref.ref(module), _call_site(module))
                else:  # keep the latest call: the training forward, not an evaluation before it
                    path, line = user_location(2)
                    self._eval_forwards[key] = (seen[0], (path, line, seen[1][2]))
        elif module.training and ("TP453", key) not in self._reported and key not in self._pending:
            self._no_grad_calls[key] = self._no_grad_calls.get(key, 0) + 1
            self._pass = _Pass(module)

    def on_forward(self, module: Any, args: tuple, output: Any) -> None:
        current = self._pass
        if current is None or module is not current.root or self.session.depth != 0:
            return
        self._pass = None
        key = id(module)
        if current.dropped:
            self._dropped.setdefault(key, set()).update(current.dropped)
        calls = self._no_grad_calls.get(key, 0)
        if calls >= VALIDATION_CALLS:
            self._single.pop(key, None)
            self._no_grad_in_train_mode(module)
        elif current.dropped and key not in self._single:  # (a teacher's: kept until the end, judged once)
            self._no_grad_in_train_mode(module, single=True)

    def _heard(self, function: str, p: float, mode_given: bool, frame: Any) -> None:
        current = self._pass
        if current is not None:
            current.dropped.add(function)

    def on_step_pre(self, optimizer: Any) -> None:
        if self.session.sampled or id(optimizer) not in self._opt_params:
            self._opt_params[id(optimizer)] = (weakref.ref(optimizer), {
                id(p) for group in optimizer.param_groups for p in group["params"] if p.requires_grad})
        if self._pending:
            self._resolve_pending()
        if self._single:
            self._resolve_single(closing=False)
        if self._eval_forwards:
            self._check_eval(optimizer)

    def on_step_end(self, step: int) -> None:
        self._eval_forwards.clear()
        self._no_grad_calls.clear()
        self._dropped.clear()

    def on_close(self) -> None:
        if self._listening:
            self._listening = False
            _dropout_calls.unsubscribe(self._heard)
        if self._pending:
            self._resolve_pending()
        if self._single or self._early:
            self._resolve_single(closing=True)

    # ------------------------------------------------------------------ helpers
    def _mode_dependent(self, root: Any) -> list[tuple[Any, str]]:
        """(module, kind) of the root's mode-dependent modules, computed once per root."""
        entry = self._kinds.get(id(root))
        if entry is None or entry[0]() is not root:
            found = []
            for m in root.modules():
                kind = _mode_kind(m)
                if kind is not None:
                    found.append((weakref.ref(m), kind))
            entry = (weakref.ref(root), found)
            self._kinds[id(root)] = entry
        return [(m, kind) for m, kind in ((ref(), kind) for ref, kind in entry[1]) if m is not None]

    def _describe(self, modules: list[tuple[Any, str]]) -> str:
        by_kind: dict[str, list[str]] = {}
        for m, kind in modules:
            by_kind.setdefault(kind, []).append(self.session.names.module(m))
        parts = []
        for kind, names in by_kind.items():
            shown = ", ".join(f"`{n}`" for n in names[:_NAME_LIMIT])
            more = f" and {len(names) - _NAME_LIMIT} more" if len(names) > _NAME_LIMIT else ""
            layers = f"layer{'' if len(names) == 1 else 's'}"
            dropout = _EFFECTS.get(kind) == "dropout" and kind not in ("Dropout", "DropPath")
            with_dropout = " with dropout" if dropout else ""
            parts.append(f"{len(names)} {kind} {layers}{with_dropout} ({shown}{more})")
        return " and ".join(parts)

    def _trained(self, param_ids: set[int]) -> bool:
        """Whether an optimizer that stepped holds one of these (trainable) parameters."""
        return any(ids & param_ids for _, ids in self._opt_params.values())

    @staticmethod
    def _model_name(root: Any, variable: str | None) -> str:
        return f"`{variable}` ({type(root).__name__})" if variable else f"`{type(root).__name__}`"

    # ------------------------------------------------------------------ TP402
    def _check_eval(self, optimizer: Any) -> None:
        ids = self._opt_params[id(optimizer)][1]
        for key, (ref, (path, line, variable)) in list(self._eval_forwards.items()):
            root = ref()
            if root is None or ("TP402", key) in self._reported:
                self._eval_forwards.pop(key, None)
                continue
            if not any(id(p) in ids for p in root.parameters() if p.requires_grad):
                continue  # not what this optimizer trains (a teacher, a frozen feature extractor)
            if any(m.training for m in root.modules()):
                self._eval_forwards.pop(key, None)  # some layers train on purpose: a deliberate mix
                continue
            affected = [(m, kind) for m, kind in self._mode_dependent(root) if not m.training]
            self._eval_forwards.pop(key, None)
            if not affected:
                continue  # no dropout / BatchNorm: both modes compute the same
            self._reported.add(("TP402", key))
            name = self._model_name(root, variable)
            self.session.report(
                EVAL_WHILE_TRAINING,
                f"{name} is in eval mode while the optimizer ({type(optimizer).__name__}) trains it: its "
                f"{self._describe(affected)} {'behaves' if len(affected) == 1 else 'behave'} as at inference — "
                f"{_effects({k for _, k in affected}, train=False)} — so it does not train as designed "
                "(model.eval() for validation without model.train() after it?)",
                subject=variable or type(root).__name__, path=path, line=line, key=("eval", key),
                fix=f"call {variable or 'model'}.train() when training resumes (e.g. at the "
                    "start of every epoch); to freeze BatchNorm on purpose, put only those layers in eval mode")

    # ------------------------------------------------------------------ TP453
    def _no_grad_in_train_mode(self, root: Any, single: bool = False) -> None:
        dropped = self._dropped.get(id(root), set())
        # dropout layers count when dropout was seen dropping (a Dropout that forward never calls does nothing)
        affected = [(m, kind) for m, kind in self._mode_dependent(root)
                    if m.training and (kind not in _SEEN_AT_THE_CALL or dropped)]
        if single:
            affected = [(m, kind) for m, kind in affected if _EFFECTS.get(kind) == "dropout"]
        if not (affected or dropped) or _in_frames(*_EXEMPT):
            return
        site = _call_site(root)
        param_ids = {id(p) for p in root.parameters() if p.requires_grad}
        kinds = {k for _, k in affected} | ({"Dropout"} if dropped else set())
        layers = self._describe(affected) if affected else f"dropout calls ({', '.join(sorted(dropped))})"
        described = f"{layers} are active — {_effects(kinds, train=True)}"
        if "batch statistics" in {_EFFECTS.get(k) for k in kinds}:
            described += " — so the evaluation is noisy and changes the model that training continues with"
        else:
            described += " — so the evaluation is noisy and pessimistic"
        import torch

        context = "torch.inference_mode()" if torch.is_inference_mode_enabled() else "torch.no_grad()"
        described = f"{context} in train mode: its {described}"
        name = self._model_name(root, site[2])
        if single:  # one pass: how it sits between the training steps decides (see _resolve_single)
            self._single[id(root)] = (site, described, name, type(root).__name__, param_ids, self._trained(param_ids))
        elif self._trained(param_ids):
            self._report_no_grad(id(root), site, described, name, type(root).__name__)
        else:  # before the first step, or a model no optimizer trains (EMA, teacher): decide at the steps
            self._pending[id(root)] = (site, described, name, type(root).__name__, param_ids)

    def _resolve_single(self, closing: bool) -> None:
        """A single no-grad pass with dropout is an evaluation during training when a step of an optimizer
        that trains the model came before it and another comes after it (a warning). One before the first
        step (a sanity check) or after the last (a final evaluation, a sample) is info, reported at the end
        unless a warning about the model came since; one of a model no optimizer trains is nothing."""
        for key, entry in list(self._single.items()):
            site, described, name, class_name, param_ids, trained_before = entry
            if closing:
                del self._single[key]
                if trained_before:
                    self._report_no_grad(key, site, described, name, class_name, severity=Severity.INFO,
                                         when=" after the last training step")
            elif self._trained(param_ids):
                del self._single[key]
                if trained_before:
                    self._report_no_grad(key, site, described, name, class_name)
                else:
                    self._early.setdefault(key, entry)
        if closing:
            for key, (site, described, name, class_name, _, _) in self._early.items():
                self._report_no_grad(key, site, described, name, class_name, severity=Severity.INFO,
                                     when=" before the first training step")
            self._early.clear()

    def _resolve_pending(self) -> None:
        for key, (site, described, name, class_name, param_ids) in list(self._pending.items()):
            if self._trained(param_ids):
                del self._pending[key]
                self._report_no_grad(key, site, described, name, class_name)

    def _report_no_grad(self, key: int, site: tuple[str | None, int | None, str | None], described: str,
                        name: str, class_name: str, severity: Severity | None = None, when: str = "") -> None:
        if ("TP453", key) in self._reported:
            return
        self._reported.add(("TP453", key))
        path, line, variable = site
        self.session.report(
            VALIDATION_IN_TRAIN_MODE,
            f"{name} runs{when} under {described} (model.eval() missing before validation?)",
            subject=variable or class_name, path=path, line=line, key=("no-grad-train", key), severity=severity,
            fix=f"call {variable or 'model'}.eval() before validating and .train() after; for Monte-Carlo "
                "dropout on purpose, switch only the dropout layers to train()")


class _Pass:
    """A forward of a model under no_grad in train mode, and the dropout functions that dropped units in it."""

    __slots__ = ("root", "dropped")

    def __init__(self, root: Any) -> None:
        self.root = root
        self.dropped: set[str] = set()
