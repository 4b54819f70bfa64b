"""Padding left in the labels: a class-index loss that counts the positions where the input is padding.

The contract: where a token-level loss (``F.cross_entropy`` / ``F.nll_loss``, or their modules) is
averaged over the targets of a batch of padded sequences, the targets at the padded positions hold
the loss's ``ignore_index`` (or a class whose ``weight`` is 0). What padding is, is read from the
model's own input on sampled steps, through the ``nn.Embedding`` calls of the step:

- declared: the embedding has ``padding_idx=p`` and rows of its input end (or start) with a run of
  ``p`` — its padding;
- inferred: no ``padding_idx`` (or another one), but many rows of the input end (or start) with a run
  of one same id whose length varies from row to row — the shape padding to a common length leaves.

A loss call of the same step whose target rows (``(B, T)``, or flattened ``(B * T,)``, batch-first or
time-first, ``T`` within one of the input's length: a shifted copy) hold a run of that id at the same
end, as long as the input's run give or take one, trains on the padding. Declared padding found so is
a `warning`; inferred padding is `info` and needs two calls. Only losses that reduce (`mean` / `sum`)
are judged: with `reduction='none'` the script may mask the pads itself.
"""

from __future__ import annotations

from typing import Any

from torchpact.findings import Category, Evidence, Severity
from torchpact.watch.frames import user_location
from torchpact.watch.watcher import Check, Watcher
from torchpact.watch.watchers import _class_losses

MAX_ROWS = 256          # rows of one batch the check reads
MAX_CALLS = 8           # embedding calls kept per step
INFERRED_CALLS = 2      # calls that must show inferred padding before it is reported
MIN_SHARE = 0.25        # inferred padding: share of the rows that end with the run
CHECKED_CALLS = 64      # loss calls judged before the check stops looking

PAD_IN_LABELS = Check(
    code="TP569",
    category=Category.DATA,
    severity=Severity.WARNING,
    severity_note="`info` when the padding id is inferred from the input's rows (runs of one id of varying "
                  "length at their ends) rather than declared by `nn.Embedding(padding_idx=...)`",
    evidence=Evidence.OBSERVED,
    summary="The labels hold the inputs' padding id at the padded positions, and the loss does not ignore it.",
    doc="""## What it does
On sampled training steps, looks at the token ids given to each `nn.Embedding` and at the targets of
each `F.cross_entropy` / `F.nll_loss` (and `nn.CrossEntropyLoss` / `nn.NLLLoss`) of the same step. It
reports when the rows of the input end (or start) with a run of the padding id, and the target rows
hold a run of that same id at the same end, as long give or take one position (a shifted copy of the
input: `labels = input_ids`), while the loss's `ignore_index` is another value (the default is -100)
and no class `weight` of 0 masks that id.

The padding id is the embedding's `padding_idx` (then a `warning`); without one it is inferred from
the rows themselves — one same id ending at least a quarter of the rows in runs of different lengths
(then `info`). A target with one label per sequence (classification), targets with -100 at the pads,
`ignore_index=pad_id`, and losses with `reduction='none'` (the script may mask them itself) are left
alone.

## Why is this bad?
`cross_entropy` averages over every target that is not `ignore_index`. With the pad id as a label, the
padded positions are trained as real tokens: the model learns to predict padding after padding (an
easy, low loss that drowns the real tokens' loss, more so the more a batch is padded), the reported
loss and perplexity are too optimistic, and a generator trained so emits runs of pad/EOS tokens. The
training runs without any error (01-ai/Yi#110; hengjiUSTC/learn-llm#2).

## How to fix
Set the labels at the padded positions to -100 (`labels[attention_mask == 0] = -100`, or
`labels[labels == pad_id] = -100` when the pad id is not also a real token), or pass
`ignore_index=pad_id` to the loss. When the pad id doubles as EOS, mask by the attention mask so the
first EOS of each row is still learned.""",
)


class PadInLabels(Watcher):
    """TP569: the inputs' padding id counted as a label."""

    name = "pad_in_labels"
    checks = (PAD_IN_LABELS,)
    unsampled_calls = "none"
    sampled_only = frozenset({"on_step_end"})

    def __init__(self) -> None:
        super().__init__()
        self._embedding_types: dict[type, bool] = {}
        self._calls: list[tuple[Any, Any, int | None]] = []   # (module, ids, padding_idx) this step
        self._pending: list[tuple[Any, dict]] = []              # (stats tensor, what to judge it with)
        self._inferred: dict[tuple, int] = {}                   # (site, id) -> calls that showed it
        self._checked = 0
        self._done = False

    def attach(self, session: Any) -> None:
        super().attach(session)
        _class_losses.subscribe(self._wants, self._hear, self._failed)

    def on_close(self) -> None:
        _class_losses.unsubscribe(self._hear)
        self._flush()

    def _failed(self, exc: Exception, where: str = "a loss call") -> None:
        """Switched off: nothing of it stays behind (the session no longer calls its ``on_close``)."""
        _class_losses.unsubscribe(self._hear)
        self._done, self._pending, self._calls = True, [], []
        self.session._failed(self, where, exc)

    # ---------------------------------------------------------------- what the step's embeddings were given
    def on_forward(self, module: Any, args: tuple, output: Any) -> None:
        try:
            self._note_embedding(module, args)
        except Exception as exc:
            self._failed(exc, "on_forward")

    def _note_embedding(self, module: Any, args: tuple) -> None:
        if self._done or not args:
            return
        cls = type(module)
        embedding = self._embedding_types.get(cls)
        if embedding is None:
            import torch.nn as nn

            embedding = self._embedding_types[cls] = isinstance(module, nn.Embedding)
        if not embedding:
            return
        ids = args[0]
        if getattr(ids, "dim", None) is None or ids.dim() != 2 or ids.is_floating_point() or ids.numel() == 0:
            return
        self._calls.append((module, ids, module.padding_idx))
        if len(self._calls) > MAX_CALLS:  # (micro-batches of one step: the latest calls are the ones that matter)
            del self._calls[0]

    def on_step_end(self, step: int) -> None:
        self._calls = []
        try:
            self._flush()
        except Exception as exc:
            self._failed(exc, "on_step_end")

    # ---------------------------------------------------------------- the loss
    def _wants(self) -> bool:
        session = self.session
        return bool(self._calls) and session.sampled and not self._done and not session.closed

    def _hear(self, call: Any) -> None:
        import torch

        if call.reduction == "none" or not torch.is_grad_enabled() or not call.class_targets():
            return  # (validation losses do not train; unreduced losses may be masked by the script)
        if not getattr(call.input, "requires_grad", False) or call.target.numel() == 0:
            return
        self._checked += 1
        if self._checked > CHECKED_CALLS:
            self._done = True
            return
        for module, ids, padding_idx in reversed(self._calls):  # the latest embedding call first
            rows = _aligned(ids, call.target)
            if rows is None:
                continue
            with torch.no_grad():
                stats = _end_runs(*rows)
            path, line = user_location(3)
            self._pending.append((stats, {
                "module": module, "padding_idx": padding_idx, "ignore_index": call.ignore_index,
                "weight": call.weight, "label": call.label(self.session), "path": path, "line": line}))
            return

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        for stats, context in pending:
            if self._done:
                return
            self._judge(stats.tolist(), context)

    def _judge(self, rows: list[list[int]], context: dict) -> None:
        best: tuple | None = None
        for end, offset in (("end", 0), ("start", 3)):
            found = _padding(rows, offset, context["padding_idx"])
            if found is None:
                continue
            pad, declared, padded, matched = found
            if pad == context["ignore_index"] or _weighted_out(context["weight"], pad):
                continue
            if best is None or (declared, matched) > (best[1], best[3]):
                best = (pad, declared, padded, matched, end)
        if best is None:
            return
        pad, declared, padded, matched, end = best
        if declared:
            self._report(context, pad, padded, matched, end, Severity.WARNING)
            return
        key = (context["path"], context["line"], pad)
        seen = self._inferred[key] = self._inferred.get(key, 0) + 1
        if seen >= INFERRED_CALLS:
            self._report(context, pad, padded, matched, end, Severity.INFO)

    def _report(self, context: dict, pad: int, padded: int, matched: int, end: str, severity: Severity) -> None:
        name = self.session.names.module(context["module"])
        where = f"it is `{name}`'s padding_idx" if severity is Severity.WARNING else (
            f"inferred: rows of `{name}`'s input {'end' if end == 'end' else 'start'} with runs of it of "
            "varying length")
        self.session.report(
            PAD_IN_LABELS,
            f"{context['label']} trains on padding: {matched} of {padded} padded rows hold the padding id {pad} "
            f"({where}) in the same run at the {end} of their labels, and ignore_index={context['ignore_index']} "
            "does not skip it, so every pad position is counted as a token to predict and the loss is averaged "
            "over pads",
            severity=severity, subject=context["label"], path=context["path"], line=context["line"],
            key=("pad", context["path"], context["line"]),
            fix=f"set the labels at padded positions to -100 (labels[attention_mask == 0] = -100), or pass "
                f"ignore_index={pad} to the loss")
        self._done = True


def _aligned(ids: Any, target: Any) -> tuple[Any, Any] | None:
    """``(input_rows, target_rows)``, both (rows, length), when ``target`` is one label per input position
    (as long as the input give or take one: a shifted copy), batch-first or time-first; else None."""
    if target.dim() > 2:
        return None
    batch, length = ids.shape
    for rows, n, transposed in ((ids, batch, False), (ids.t(), length, True)):
        seq = rows.shape[1]
        if target.dim() == 2:
            t = target.t() if transposed else target
            if t.shape[0] == n and abs(t.shape[1] - seq) <= 1 and t.shape[1] > 1:
                return rows[:MAX_ROWS], t[:MAX_ROWS]
            continue
        total = target.shape[0]
        if total % n or abs(total // n - seq) > 1 or total // n < 2:
            continue
        t = target.reshape(total // n, n).t() if transposed else target.reshape(n, total // n)
        return rows[:MAX_ROWS], t[:MAX_ROWS]
    return None


def _run(x: Any, value: Any) -> Any:
    """Per row of ``x``, how many positions at its end hold that row's ``value``."""
    import torch

    return (x == value[:, None]).flip(1).to(torch.int64).cumprod(1).sum(1)


def _end_runs(ids: Any, target: Any) -> Any:
    """(rows, 6): the id ending each input row, the length of its run there in the input and in the target;
    the same for the start of the row."""
    import torch

    ids = ids.detach()
    target = target.detach().to(ids.device)
    last, first = ids[:, -1], ids[:, 0]
    return torch.stack([
        last.to(torch.int64), _run(ids, last), _run(target, last),
        first.to(torch.int64), _run(ids.flip(1), first), _run(target.flip(1), first)], dim=1)


def _padding(rows: list[list[int]], offset: int, padding_idx: int | None) -> tuple[int, bool, int, int] | None:
    """At one end of the rows: (pad id, declared by padding_idx, padded rows, rows whose target holds the
    same run), when the input looks padded there and the targets carry the padding; else None.

    A row counts as padded when its run is at least 2 long, so that a copy shifted by one still holds it."""
    by_id: dict[int, list[tuple[int, int]]] = {}
    for row in rows:
        value, run_in, run_target = row[offset], row[offset + 1], row[offset + 2]
        if run_in >= 2:
            by_id.setdefault(value, []).append((run_in, run_target))
    if not by_id:
        return None
    if padding_idx is not None and padding_idx in by_id:
        pad, declared = padding_idx, True
    else:
        pad, declared = max(by_id, key=lambda v: len(by_id[v])), False
    padded = by_id[pad]
    matched = sum(1 for run_in, run_target in padded if run_target >= 1 and abs(run_target - run_in) <= 1)
    if 2 * matched < len(padded):
        return None
    if not declared:
        lengths = {run_in for run_in, _ in padded}
        unpadded = len(rows) - len(padded)
        if len(padded) < 2 or len(padded) < MIN_SHARE * len(rows) or (len(lengths) < 2 and not unpadded):
            return None  # not the shape of padding: too few rows, or every row ends the same way
    return pad, declared, len(padded), matched


def _weighted_out(weight: Any, pad: int) -> bool:
    """Whether the loss's class ``weight`` gives the pad id no weight (which ignores it as well)."""
    if weight is None or not 0 <= pad < weight.numel():
        return False
    return float(weight[pad]) == 0.0
