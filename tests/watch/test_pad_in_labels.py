"""Runtime TP569: the inputs' padding id left in the labels of a token loss (01-ai/Yi#110 class).

Variants written from the contract before the check was tuned: declared `padding_idx` with right padding
and a flattened functional loss; a negative `padding_idx`, left padding and the module loss on (B, V, T)
logits; padding inferred (no `padding_idx`, pad = EOS) through `nll_loss`; a time-first GRU seq2seq
decoder. Clean twins: -100 at the pads, `ignore_index=pad`, a class weight of 0 on the pad, data with no
padding, a classifier whose class 0 equals `padding_idx`, a tagger whose real labels include 0.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.watch.util import watched

WATCHERS = ["pad_in_labels"]
VOCAB = 12


def _padded(batch: int, length: int, pad: int, *, left: bool = False, full: bool = False, low: int = 1,
            high: int = VOCAB, generator: torch.Generator) -> torch.Tensor:
    """Rows of random real tokens of random lengths, padded with ``pad`` to ``length``."""
    rows = torch.full((batch, length), pad, dtype=torch.long)
    for i in range(batch):
        n = length if full or i == 0 else int(torch.randint(3, length, (1,), generator=generator))
        tokens = torch.randint(low, high, (n,), generator=generator)
        if left:
            rows[i, length - n:] = tokens
        else:
            rows[i, :n] = tokens
    return rows


class TinyLM(nn.Module):
    def __init__(self, padding_idx=None):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 16, padding_idx=padding_idx)
        self.out = nn.Linear(16, VOCAB)

    def forward(self, ids):
        return self.out(torch.tanh(self.emb(ids)))


def _train_right_padded(steps=6, *, labels_fix=None, ignore_index=-100, full=False, weight=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = TinyLM(padding_idx=0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        seq = _padded(8, 10, 0, full=full, generator=g)
        inputs, targets = seq[:, :-1], seq[:, 1:].clone()
        if labels_fix == "minus100":
            targets[targets == 0] = -100
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1), ignore_index=ignore_index,
                               weight=weight)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


class Decoder(nn.Module):
    """A model whose embedding sits in a submodule; the shift happens inside forward."""

    def __init__(self):
        super().__init__()
        self.body = nn.ModuleDict({"tok": nn.Embedding(VOCAB, 16, padding_idx=-1), "mix": nn.Linear(16, 16)})
        self.head = nn.Linear(16, VOCAB)

    def forward(self, input_ids):
        return self.head(F.gelu(self.body["mix"](self.body["tok"](input_ids))))


def _train_left_padded_module_loss(steps=6):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(2)
    model = Decoder()
    pad = VOCAB - 1
    criterion = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        input_ids = _padded(6, 12, pad, left=True, high=pad, generator=g)
        labels = input_ids
        logits = model(input_ids)[:, :-1]                 # (B, T-1, V)
        loss = criterion(logits.transpose(1, 2), labels[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()


def _train_inferred_eos_padding(steps=6, *, mask_labels=False):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(3)
    eos = 1
    model = TinyLM(padding_idx=None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(steps):
        ids = _padded(8, 10, eos, low=2, generator=g)
        attention = (ids != eos).long()
        labels = ids.clone()
        if mask_labels:
            labels[attention == 0] = -100
        log_probs = F.log_softmax(model(ids), dim=-1)
        loss = F.nll_loss(log_probs[:, :-1].reshape(-1, VOCAB), labels[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()


class Seq2Seq(nn.Module):
    """Time-first, as nn.GRU's default layout."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16, padding_idx=0)
        self.rnn = nn.GRU(16, 16)
        self.proj = nn.Linear(16, VOCAB)

    def forward(self, tgt_in):                              # (T, B)
        h, _ = self.rnn(self.embed(tgt_in))
        return self.proj(h)                                 # (T, B, V)


def _train_time_first(steps=6):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(4)
    model = Seq2Seq()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    bos = 1
    for _ in range(steps):
        tgt = _padded(7, 9, 0, low=2, generator=g).t()      # (T, B)
        tgt_in = torch.cat([torch.full((1, tgt.shape[1]), bos), tgt[:-1]])
        out = model(tgt_in)
        loss = F.cross_entropy(out.view(-1, VOCAB), tgt.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()


def _findings(fn):
    return [f for f in watched(fn, WATCHERS) if f.code == "TP569"]


def test_declared_padding_idx_in_shifted_labels_is_a_warning():
    [f] = _findings(_train_right_padded)
    assert f.severity.value == "warning"
    assert "padding id 0" in f.message and "padding_idx" in f.message and "ignore_index=-100" in f.message
    assert f.path.endswith("test_pad_in_labels.py") and "ignore_index=0" in f.fix


def test_negative_padding_idx_left_padding_and_the_module_loss():
    [f] = _findings(_train_left_padded_module_loss)
    assert f.severity.value == "warning" and f"padding id {VOCAB - 1}" in f.message and "start" in f.message


def test_padding_inferred_from_the_rows_is_info():
    [f] = _findings(_train_inferred_eos_padding)
    assert f.severity.value == "info" and "padding id 1" in f.message and "inferred" in f.message


def test_time_first_layout():
    [f] = _findings(_train_time_first)
    assert f.severity.value == "warning" and "padding id 0" in f.message


@pytest.mark.parametrize("variant", [
    dict(labels_fix="minus100"), dict(ignore_index=0), dict(full=True),
    dict(weight=torch.cat([torch.zeros(1), torch.ones(VOCAB - 1)])),
], ids=["minus100-at-pads", "ignore-index-is-pad", "no-padding", "pad-class-weight-0"])
def test_clean_twins_are_silent(variant):
    assert _findings(lambda: _train_right_padded(**variant)) == []


def test_inferred_padding_masked_by_the_attention_mask_is_silent():
    assert _findings(lambda: _train_inferred_eos_padding(mask_labels=True)) == []


def test_a_classifier_whose_class_equals_padding_idx_is_silent():
    def train():
        torch.manual_seed(0)
        g = torch.Generator().manual_seed(5)
        embed, head = nn.Embedding(VOCAB, 16, padding_idx=0), nn.Linear(16, 4)
        opt = torch.optim.Adam([*embed.parameters(), *head.parameters()], lr=1e-2)
        for _ in range(6):
            ids = _padded(8, 10, 0, generator=g)
            y = torch.randint(0, 4, (8,), generator=g)
            y[:4] = 0                                   # class 0 = padding_idx, one label per row
            loss = F.cross_entropy(head(embed(ids).mean(1)), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert _findings(train) == []


def test_a_tagger_whose_real_labels_include_the_pad_value_is_silent():
    """Token labels 0..3 (0 is a real tag, as "O"), -100 at the padded positions."""
    def train():
        torch.manual_seed(0)
        g = torch.Generator().manual_seed(6)
        embed, head = nn.Embedding(VOCAB, 16, padding_idx=0), nn.Linear(16, 4)
        opt = torch.optim.Adam([*embed.parameters(), *head.parameters()], lr=1e-2)
        for _ in range(6):
            ids = _padded(8, 10, 0, generator=g)
            tags = torch.randint(0, 4, ids.shape, generator=g)
            tags[:, -3:] = 0                            # real rows often end in 0 ...
            tags[ids == 0] = -100                       # ... but the pads are ignored
            loss = F.cross_entropy(head(embed(ids)).transpose(1, 2), tags)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert _findings(train) == []


def test_training_is_bit_identical_under_the_watcher():
    plain = _train_right_padded(steps=4).state_dict()
    out = {}
    watched(lambda: out.setdefault("m", _train_right_padded(steps=4)), WATCHERS)
    for key, value in out["m"].state_dict().items():
        assert torch.equal(value, plain[key]), key
