"""Runtime TP479: gradient accumulation of per-micro-batch mean losses over unequal target counts
(huggingface/transformers#34191 / #35203, karpathy/nanochat#59 class).

Variants written from the contract before the check was tuned: micro-batches of different lengths with a
flattened `F.cross_entropy / accum`; padded micro-batches whose -100 counts differ, `nn.CrossEntropyLoss`
and a GradScaler-style constant factor; `nll_loss` on (B, V, T) with `ignore_index=pad`, each micro-batch
back-propagated inside a helper. Clean twins: equal counts, `reduction='sum'` over the step's count, each
mean re-weighted by its count, one backward per step.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.watch.util import watched
from torchpact.watch import watch

WATCHERS = ["grad_accum_token_mean"]
VOCAB = 10


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 16)
        self.head = nn.Linear(16, VOCAB)

    def forward(self, x):
        return self.head(torch.tanh(self.emb(x)))


def _lengths_by_micro_batch(steps, accum, equal):
    """Sequence lengths per micro-batch: grouped by length (short and long micro-batches) or all equal."""
    if equal:
        return [[16] * accum for _ in range(steps)]
    return [[4 if k % 2 == 0 else 24 for k in range(accum)] for _ in range(steps)]


def _train_lengths(steps=8, accum=4, equal=False, mode="mean"):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = LM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for lengths in _lengths_by_micro_batch(steps, accum, equal):
        batches = [torch.randint(0, VOCAB, (4, n + 1), generator=g) for n in lengths]
        total = sum(b[:, 1:].numel() for b in batches)
        opt.zero_grad()
        for seq in batches:
            x, y = seq[:, :-1], seq[:, 1:]
            logits = model(x).reshape(-1, VOCAB)
            if mode == "mean":
                loss = F.cross_entropy(logits, y.reshape(-1)) / accum
            elif mode == "sum":
                loss = F.cross_entropy(logits, y.reshape(-1), reduction="sum") / total
            else:  # each mean re-weighted by its share of the step's targets
                loss = F.cross_entropy(logits, y.reshape(-1)) * (y.numel() / total)
            loss.backward()
        opt.step()
    return model


def _train_padded_module(steps=8, accum=3, scale=1024.0):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(2)
    model = LM()
    criterion = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(steps):
        for k in range(accum):
            seq = torch.randint(0, VOCAB, (6, 20), generator=g)
            labels = seq.clone()
            keep = 20 if k == 0 else 5          # the first micro-batch holds long texts, the others short ones
            labels[:, keep:] = -100
            loss = criterion(model(seq).view(-1, VOCAB), labels.view(-1))
            (loss * scale / accum).backward()   # a constant factor, as GradScaler.scale applies
        for p in model.parameters():
            p.grad.div_(scale)
        opt.step()
        opt.zero_grad(set_to_none=True)


def _micro_step(model, seq, pad, accum):
    log_probs = F.log_softmax(model(seq), dim=-1).permute(0, 2, 1)   # (B, V, T)
    loss = F.nll_loss(log_probs[:, :, :-1], seq[:, 1:], ignore_index=pad)
    (loss / accum).backward()


def _train_nll_helper(steps=8, accum=2):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(3)
    model = LM()
    pad = 0
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        opt.zero_grad()
        for k in range(accum):
            seq = torch.randint(1, VOCAB, (8, 16), generator=g)
            seq[:, (3 if k else 16):] = pad                  # one micro-batch mostly padding
            _micro_step(model, seq, pad, accum)
        opt.step()


def _findings(fn):
    return [f for f in watched(fn, WATCHERS) if f.code == "TP479"]


def test_micro_batches_of_different_lengths_averaged_per_micro_batch():
    [f] = _findings(_train_lengths)
    assert f.severity.value == "warning" and "6.0x" in f.message and "micro-batches" in f.message


def test_padded_micro_batches_with_the_loss_module_and_a_constant_scale():
    [f] = _findings(_train_padded_module)
    assert f.severity.value == "warning" and "4.0x" in f.message


def test_nll_loss_with_ignore_index_pad_inside_a_helper():
    [f] = _findings(_train_nll_helper)
    assert f.severity.value == "warning"


def test_equal_counts_are_silent():
    assert _findings(lambda: _train_lengths(equal=True)) == []


def test_sum_over_the_steps_count_is_silent():
    assert _findings(lambda: _train_lengths(mode="sum")) == []


def test_means_reweighted_by_their_counts_are_silent():
    assert _findings(lambda: _train_lengths(mode="weighted")) == []


def test_one_backward_per_step_is_silent():
    assert _findings(lambda: _train_lengths(accum=1)) == []


def test_a_short_last_micro_batch_on_few_steps_is_at_most_info():
    def train():
        torch.manual_seed(0)
        model = LM()
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        data = torch.randint(0, VOCAB, (70, 9))
        for _epoch in range(2):
            for start in range(0, 70, 32):                   # 32, 32, 6 sequences: one short micro-batch
                seq = data[start:start + 32]
                loss = F.cross_entropy(model(seq[:, :-1]).reshape(-1, VOCAB), seq[:, 1:].reshape(-1))
                loss.backward()
            opt.step()
            opt.zero_grad()
        for _ in range(10):                                  # then plain steps of equal counts, accumulated by 2
            for _ in range(2):
                seq = data[:32]
                F.cross_entropy(model(seq[:, :-1]).reshape(-1, VOCAB), seq[:, 1:].reshape(-1)).backward()
            opt.step()
            opt.zero_grad()
    [f] = _findings(train)
    assert f.severity.value == "info" and "2 of the 10 judged" in f.message   # steps 0-9 are the sampled ones


def test_training_is_bit_identical_under_the_watcher():
    plain = _train_lengths(steps=3).state_dict()
    out = {}
    watched(lambda: out.setdefault("m", _train_lengths(steps=3)), WATCHERS)
    for key, value in out["m"].state_dict().items():
        assert torch.equal(value, plain[key]), key


def test_every_wrapper_is_gone_after_the_session_also_when_a_watcher_fails():
    from torchpact.watch.watchers import _class_losses

    before = (F.cross_entropy, F.nll_loss, torch.autograd.backward)
    watched(lambda: _train_lengths(steps=2), ["grad_accum_token_mean", "pad_in_labels", "decorrelated_labels"])
    assert (F.cross_entropy, F.nll_loss, torch.autograd.backward) == before

    def broken(call):
        raise RuntimeError("boom")

    with watch(["grad_accum_token_mean"]) as session:
        [watcher] = session.watchers
        watcher._hear = broken            # a listener that raises: dropped, reported, nothing left behind
        _class_losses._listeners[-1] = (watcher._wants, broken, watcher._failed)
        _train_lengths(steps=2)
    assert [f.code for f in session.findings] == ["TP002"]
    assert (F.cross_entropy, F.nll_loss, torch.autograd.backward) == before and not _class_losses._listeners
