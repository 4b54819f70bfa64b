"""A model trained to predict the next token whose outputs at early positions depend on later tokens.

A next-token objective trains the output at position ``t`` against the input token ``t + 1``: the model
must not see it. Attention heads merged by ``reshape`` without their ``permute``
(jsbaan/transformer-from-scratch#4), a missing or inverted causal mask, a bidirectional RNN or a centred
convolution all let it through, the loss falls far below what the data allows, and generation is garbage.

Two steps, both on sampled steps:

- *Is it trained on next tokens?* The 2-D integer tensors a model is called with (positional, or keyword
  through the call's frame: ``input_ids=``) are compared with the integer targets of the loss calls of
  the same step (``_loss_calls``): a target that equals one of them shifted by one position (read as
  ``(batch, seq)`` or ``(batch, seq - 1)``, ignored positions aside) is a next-token objective. Compared
  on at most ``SIGNAL_CHECKS`` loss calls per model: one small comparison and one read each.
- *Does an early output see a later token?* Once per model, at the optimizer step that follows, the
  model is run twice on a private copy (``_probe``: parameters shared read-only, buffers cloned, no hook,
  eval mode on the copy, no grad, every random generator restored) on the first rows of that batch, the
  second time with only the last token changed. Outputs of shape ``(batch, seq, ...)`` (or
  ``(seq, batch, ...)``) that change at any earlier position leak.

Models whose forward is replaced on the instance, sharded (FSDP) or distributed-tensor models, models
on devices whose random state cannot be restored, and ``SyncBatchNorm`` under several ranks are not
probed.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

from torchpact.findings import Category, Severity
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers._loss_calls import LossCall, LossCalls
from torchpact.watch.watchers._probe import private_copy, set_eval, unobserved

SIGNAL_CHECKS = 16   # loss calls compared with a model's tokens before giving up on it
PROBE_ROWS = 4       # rows of the batch the probe runs on
TOLERANCE = 1e-4     # relative change at an earlier position that counts (a causal model changes exactly 0)
ERROR_AT = 1e-2      # relative change from which the leak is certain to matter

CAUSAL_LEAK = Check(
    code="TP468",
    category=Category.TRAINING,
    severity=Severity.ERROR,
    severity_note="`warning` when the earlier outputs change by less than 1% of their scale",
    summary="A model trained to predict the next token sees later tokens: its early outputs change when "
            "only the last token does.",
    doc="""## What it does
At runtime, on sampled steps, compares the integer tensors a model is called with (`idx`,
`input_ids=...`) with the integer targets of the loss calls of the same step. When a target is the
input shifted by one position (a next-token objective, the shift done outside the model or inside it),
it runs the model once more on a private copy (parameters shared read-only, buffers cloned, eval mode on
the copy, no grad, random state restored, no hook) on a few rows of the same batch, then again with
only the last token changed. It reports the model when an output at an earlier position changes.
Models without a next-token target (masked-token or classification objectives) are never probed.

## Why is this bad?
With a next-token objective the output at position `t` is trained against token `t + 1`. If it can see
that token — attention heads merged by `reshape` without their `permute`, so that one row of the
merged output mixes several positions (jsbaan/transformer-from-scratch#4), a missing or inverted causal
mask, `F.scaled_dot_product_attention` without `is_causal=True`, a bidirectional RNN, a convolution
padded on both sides — the model learns to copy the answer from its input. The training loss falls far
below the data's real entropy, and at generation time, when the future is not there, predictions are
poor. Nothing raises on torch 2.13.

## How to fix
Make every layer causal: a causal mask (`is_causal=True`, `nn.Transformer.generate_square_subsequent_mask`,
`torch.triu(..., diagonal=1)` filled with -inf), heads merged as `y.transpose(1, 2).reshape(B, T, C)`,
one-directional RNNs, convolutions padded on the left only (`F.pad(x, (k - 1, 0))`). To check, change the
last token of an input and compare the outputs at the earlier positions: they must be identical.""",
)


class _Root:
    """What is known about one model called at the top level."""

    def __init__(self, module: Any) -> None:
        self.ref = weakref.ref(module)
        self.checks = 0
        self.done = False


class _Call:
    """One call of a model on a sampled step, with its candidate token tensors."""

    def __init__(self, root: _Root, module: Any, args: tuple, kwargs: dict, tokens: list[tuple[Any, Any]],
                 site: tuple) -> None:
        self.root, self.module, self.args, self.kwargs = root, module, args, kwargs
        self.tokens, self.site = tokens, site


class CausalLeak(Watcher):
    """TP468: future tokens leak into earlier positions of a next-token model."""

    name = "causal_leak"
    checks = (CAUSAL_LEAK,)
    unsampled_calls = "none"
    sampled_only = frozenset({"on_step_pre", "on_step_end"})

    def __init__(self) -> None:
        super().__init__()
        self._roots: dict[int, _Root] = {}
        self._calls: list[_Call] = []
        self._pending: list[tuple[_Call, Any, LossCall]] = []
        self._losses: LossCalls | None = None

    def attach(self, session: Any) -> None:
        super().attach(session)
        self._losses = LossCalls(self, self._loss_call, functions=("cross_entropy", "nll_loss"))
        self._losses.install()

    def on_close(self) -> None:
        if self._losses is not None:
            self._losses.remove()
        self._calls.clear()
        self._pending.clear()

    def on_step_end(self, step: int) -> None:
        self._calls.clear()
        self._pending.clear()

    # ------------------------------------------------------------------ calls and targets
    def on_forward_pre(self, module: Any, args: tuple) -> None:
        losses = self._losses
        if losses is not None and losses.is_loss_module(module):
            losses.module_call(module, args)
            return
        if self.session.depth != 1:
            return
        root = self._roots.get(id(module))
        if root is None or root.ref() is not module:
            root = self._roots[id(module)] = _Root(module)
        if root.done or root.checks >= SIGNAL_CHECKS:
            return
        kwargs = _call_kwargs(module)
        tokens = [(("arg", i), a) for i, a in enumerate(args) if _tokens(a)]
        tokens += [(("kw", k), v) for k, v in kwargs.items() if _tokens(v)]
        if not tokens:
            return
        self._calls = [*self._calls[-3:], _Call(root, module, args, kwargs, tokens,
                                                self.session.root_call_sites.get(id(module), (None, None)))]

    def _loss_call(self, call: LossCall) -> None:
        target = call.target
        if not self._calls or not _integer(target) or target.ndim == 0:
            return
        for c in reversed(self._calls):
            if c.root.done or c.root.checks >= SIGNAL_CHECKS or any(p[0] is c for p in self._pending):
                continue
            c.root.checks += 1
            for key, tokens in c.tokens:
                if _shifted(tokens, target, call.ignore_index):
                    self._pending.append((c, key, call))
                    return

    # ------------------------------------------------------------------ the probe
    def on_step_pre(self, optimizer: Any) -> None:
        pending, self._pending = self._pending, []
        for call, key, loss in pending:
            if call.root.done:
                continue
            call.root.done = True  # one probe per model, whatever it finds
            found = self._probe(call, key)
            if found is not None:
                self._report(call, key, loss, *found)

    def _probe(self, call: _Call, key: Any) -> tuple[int, int, float, float] | None:
        """(first earlier position that changed, sequence length, its largest change, the outputs' scale)."""
        import torch
        from torch.utils._pytree import tree_leaves, tree_map

        model = _unwrap(call.module)
        tokens = dict(call.tokens)[key]
        if model is None or torch.compiler.is_compiling():
            return None
        b, t = tokens.shape
        lo, hi = (int(v) for v in torch.stack([tokens.min(), tokens.max()]).tolist())
        if lo == hi:
            return None
        rows = min(b, PROBE_ROWS)

        def first_rows(x: Any) -> Any:
            if isinstance(x, torch.Tensor) and x.ndim >= 1 and x.shape[0] == b:
                return x[:rows].detach().clone()
            return x

        args, kwargs = tree_map(first_rows, (call.args, call.kwargs))
        kept = first_rows(tokens)
        changed = kept.clone()
        last = kept[:, -1]
        changed[:, -1] = torch.where(last == hi, torch.full_like(last, lo), torch.full_like(last, hi))
        args2, kwargs2 = list(args), dict(kwargs)
        if key[0] == "arg":
            args = (*args[:key[1]], kept, *args[key[1] + 1:])
            args2[key[1]] = changed
        else:
            kwargs[key[1]] = kept
            kwargs2[key[1]] = changed
        devices = sorted({t.device.index or 0 for t in (*model.parameters(), *model.buffers(), kept)
                          if t.device.type == "cuda"})
        try:
            copy = private_copy(model)
            set_eval(copy)
            with unobserved(devices) as rewind:
                first = copy.forward(*args, **kwargs)
                rewind()
                second = copy.forward(*args2, **kwargs2)
                a, z = _sequence_output(tree_leaves(first), rows, t), _sequence_output(tree_leaves(second), rows, t)
                if a is None or z is None or a[0].shape != z[0].shape:
                    return None
                dim = a[1]
                early_a, early_z = a[0].narrow(dim, 0, t - 1).float(), z[0].narrow(dim, 0, t - 1).float()
                change = (early_a - early_z).abs()
                other = [d for d in range(change.ndim) if d != dim]
                per_position = change.amax(dim=other) if other else change
                values = torch.cat([per_position, early_a.abs().amax().reshape(1)]).tolist()
        except Exception:  # noqa: BLE001 - a model that cannot run on the side (NotCopyable, ...) is not probed
            return None
        *per_position_values, scale = values
        threshold = TOLERANCE * max(scale, 1e-6)
        changed_at = [p for p, v in enumerate(per_position_values) if v > threshold]
        if not changed_at:
            return None
        return changed_at[0], t, max(per_position_values), scale

    def _report(self, call: _Call, key: Any, loss: LossCall, position: int, length: int, change: float,
                scale: float) -> None:
        name = self.session.names.module(call.module)
        tokens = f"`{key[1]}=`" if key[0] == "kw" else f"argument {key[1]}"
        where = f" at {_base(loss.path)}:{loss.line}" if loss.path else ""
        relative = change / scale if scale > 0 else float("inf")
        self.session.report(
            CAUSAL_LEAK,
            f"`{name}` is trained to predict the next token (the target given to {loss.label}{where} is its input "
            f"{tokens} shifted by one position), but its outputs at earlier positions change when only the last "
            f"token (position {length - 1}) does — from position {position} on, by up to {change:.3g} ({relative:.1%} "
            "of their scale): earlier positions see later tokens, so training copies the answer from the input and "
            "the loss is far below the model's real next-token loss (probed once, on a copy in eval mode)",
            subject=name, path=call.site[0], line=call.site[1], key=("leak", id(call.module)),
            severity=Severity.ERROR if relative >= ERROR_AT else Severity.WARNING,
            position=position, relative_change=relative,
            fix="make every layer causal: a causal mask (is_causal=True, "
                "nn.Transformer.generate_square_subsequent_mask), heads merged as y.transpose(1, 2).reshape(B, T, C), "
                "one-directional RNNs, convolutions padded on the left only")


def _base(path: str) -> str:
    import os

    return os.path.basename(path)


def _integer(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor) and not x.is_floating_point() and not x.is_complex() \
        and x.dtype is not torch.bool and x.device.type != "meta"


def _tokens(x: Any) -> bool:
    return _integer(x) and x.ndim == 2 and x.shape[1] >= 2 and x.shape[0] >= 1


def _shifted(tokens: Any, target: Any, ignore: int | None) -> bool:
    """Whether ``target`` is ``tokens`` shifted by one position: ``target[:, p] == tokens[:, p + 1]``."""
    import torch

    b, t = tokens.shape
    n = target.numel()
    if target.device != tokens.device:
        return False
    if n == b * t:
        predicted = target.reshape(b, t)[:, : t - 1]
    elif n == b * (t - 1):
        predicted = target.reshape(b, t - 1)
    else:
        return False
    following = tokens[:, 1:]
    with torch.no_grad():
        valid = predicted != ignore if ignore is not None else torch.ones_like(predicted, dtype=torch.bool)
        same = ((predicted == following) | ~valid).all()
        some = valid.any()
        ok, any_valid = torch.stack([same, some]).tolist()
    return bool(ok and any_valid)


def _sequence_output(leaves: list[Any], rows: int, length: int) -> tuple[Any, int] | None:
    """The first floating-point output shaped (rows, length, ...) or (length, rows, ...), with its position dim."""
    import torch

    for leaf in leaves:
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point() and leaf.ndim >= 2:
            if leaf.shape[0] == rows and leaf.shape[1] == length:
                return leaf, 1
            if leaf.shape[0] == length and leaf.shape[1] == rows:
                return leaf, 0
    return None


def _unwrap(module: Any) -> Any:
    """The model a probe may run: wrappers removed (DDP, DataParallel, torch.compile); None when it may not."""
    import torch
    import torch.nn as nn

    for _ in range(4):
        if isinstance(module, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            module = module.module
        elif type(module).__name__ == "OptimizedModule" and hasattr(module, "_orig_mod"):
            module = module._orig_mod
        else:
            break
    dist = sys.modules.get("torch.distributed")
    several = dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    for m in module.modules():
        name = type(m).__name__
        sharded = "FullyShardedDataParallel" in name or name.startswith("FSDP")
        if sharded or (several and isinstance(m, nn.SyncBatchNorm)):
            return None
    for t in (*module.parameters(), *module.buffers()):
        if type(t) not in (torch.Tensor, nn.Parameter) or t.device.type not in ("cpu", "cuda"):
            return None
    return module


def _call_kwargs(module: Any) -> dict:
    """The keyword arguments of the running call of ``module`` (torch's global hooks do not pass them)."""
    frame = sys._getframe(2)
    for _ in range(6):
        if frame is None:
            break
        if frame.f_code.co_name in ("inner", "_call_impl", "__call__"):
            local = frame.f_locals
            if local.get("self") is module and isinstance(local.get("kwargs"), dict):
                return dict(local["kwargs"])
        frame = frame.f_back
    return {}
