"""Runtime TP468: a model trained to predict the next token whose outputs at early positions depend on later
tokens.

Variants written before the watcher was tuned: attention heads merged by `reshape` without the `permute`
(next-token targets passed to the model, loss inside), attention with no causal mask (loss outside, on
`F.cross_entropy`), an `nn.TransformerEncoder` used as a language model without a mask (Hugging Face style:
`model(input_ids=..., labels=...)` shifting inside, `nn.CrossEntropyLoss`), a bidirectional LSTM and a
centred convolution. Clean twins: the same models made causal (the permute, `is_causal=True`, a square
subsequent mask, one direction, left padding), with dropout on; and a bidirectional encoder trained on
masked tokens or on classification, which has no next-token target.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.watch.util import codes, watched

WATCHER = ["causal_leak"]
V, T, B, D, H = 13, 8, 6, 16, 2


def _batches(n=4):
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, V, (n, B, T + 1), generator=g)
    return [(d[:, :-1], d[:, 1:]) for d in data]


class Attention(nn.Module):
    def __init__(self, merge="permute", causal=True, dropout=0.0):
        super().__init__()
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.merge, self.causal, self.p = merge, causal, dropout

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, H, c // H).transpose(1, 2) for z in self.qkv(x).split(c, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, dropout_p=self.p if self.training else 0.0)
        if self.merge == "permute":
            y = y.transpose(1, 2).contiguous().view(b, t, c)
        else:
            y = y.reshape(b, t, c)  # the bug: (b, heads, t, hs) read as (b, t, c) mixes positions
        return self.proj(y)


class TinyGPT(nn.Module):
    def __init__(self, **attn):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Parameter(torch.zeros(T, D))
        self.attn, self.drop, self.head = Attention(**attn), nn.Dropout(0.1), nn.Linear(D, V)

    def forward(self, idx, targets=None):
        x = self.drop(self.tok(idx) + self.pos[: idx.size(1)])
        logits = self.head(x + self.attn(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, V), targets.reshape(-1))
        return logits, loss


def _train_inside(model):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for x, y in _batches():
        opt.zero_grad()
        _, loss = model(x, y)
        loss.backward()
        opt.step()


def _train_outside(model):
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    for x, y in _batches():
        opt.zero_grad()
        out = model(x)
        logits = out[0] if isinstance(out, tuple) else out
        F.cross_entropy(input=logits.reshape(-1, V), target=y.reshape(-1)).backward()
        opt.step()


def _tp468(findings):
    return [f for f in findings if f.code == "TP468"]


def test_the_bug_is_real_on_this_torch():
    torch.manual_seed(0)
    model = TinyGPT(merge="reshape").eval()
    x = _batches()[0][0]
    changed = x.clone()
    changed[:, -1] = (changed[:, -1] + 1) % V
    with torch.no_grad():
        a, b = model(x)[0], model(changed)[0]
    assert (a[:, :-1] - b[:, :-1]).abs().max() > 1e-3


def test_heads_merged_by_reshape_with_the_loss_inside_the_model():
    torch.manual_seed(0)
    [f] = _tp468(watched(lambda: _train_inside(TinyGPT(merge="reshape")), WATCHER))
    assert f.severity.value == "error" and "position" in f.message and "next token" in f.message


def test_no_causal_mask_with_the_loss_outside():
    torch.manual_seed(0)
    assert len(_tp468(watched(lambda: _train_outside(TinyGPT(causal=False)), WATCHER))) == 1


class EncoderLM(nn.Module):
    """An nn.TransformerEncoder used as a language model, Hugging Face style: labels in, shifted inside."""

    def __init__(self, causal):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, 32, dropout=0.1, batch_first=True), 1)
        self.lm_head, self.causal, self.loss_fct = nn.Linear(D, V), causal, nn.CrossEntropyLoss()

    def forward(self, input_ids=None, labels=None):
        t = input_ids.size(1)
        mask = nn.Transformer.generate_square_subsequent_mask(t) if self.causal else None
        logits = self.lm_head(self.enc(self.emb(input_ids), mask=mask, is_causal=self.causal))
        loss = None
        if labels is not None:
            loss = self.loss_fct(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1))
        return {"loss": loss, "logits": logits}


def _train_hf_style(model):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for x, _ in _batches():
        opt.zero_grad()
        model(input_ids=x, labels=x)["loss"].backward()
        opt.step()


def test_encoder_without_a_mask_trained_hugging_face_style():
    torch.manual_seed(0)
    [f] = _tp468(watched(lambda: _train_hf_style(EncoderLM(causal=False)), WATCHER))
    assert f.subject == "EncoderLM"


class RecurrentLM(nn.Module):
    def __init__(self, bidirectional):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.rnn = nn.LSTM(D, D, batch_first=True, bidirectional=bidirectional)
        self.head = nn.Linear(D * (2 if bidirectional else 1), V)

    def forward(self, x):
        return self.head(self.rnn(self.emb(x))[0])


class ConvLM(nn.Module):
    def __init__(self, causal):
        super().__init__()
        self.emb, self.conv, self.head, self.causal = nn.Embedding(V, D), nn.Conv1d(D, D, 3), nn.Linear(D, V), causal

    def forward(self, x):
        h = self.emb(x).transpose(1, 2)
        h = F.pad(h, (2, 0) if self.causal else (1, 1))  # centred padding sees the next token
        return self.head(self.conv(h).transpose(1, 2))


def test_bidirectional_lstm_and_centred_convolution():
    torch.manual_seed(0)
    assert len(_tp468(watched(lambda: _train_outside(RecurrentLM(bidirectional=True)), WATCHER))) == 1
    assert len(_tp468(watched(lambda: _train_outside(ConvLM(causal=False)), WATCHER))) == 1


def test_causal_twins_are_silent():
    torch.manual_seed(0)
    assert codes(watched(lambda: _train_inside(TinyGPT(dropout=0.2)), WATCHER)) == []
    assert codes(watched(lambda: _train_outside(TinyGPT()), WATCHER)) == []
    assert codes(watched(lambda: _train_hf_style(EncoderLM(causal=True)), WATCHER)) == []
    assert codes(watched(lambda: _train_outside(RecurrentLM(bidirectional=False)), WATCHER)) == []
    assert codes(watched(lambda: _train_outside(ConvLM(causal=True)), WATCHER)) == []


def test_bidirectional_encoders_without_next_token_targets_are_silent():
    """A masked-token objective and a classifier: no target is the input shifted, so nothing is probed."""
    torch.manual_seed(0)

    def masked_tokens():
        model = EncoderLM(causal=False)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for x, _ in _batches():
            labels = torch.full_like(x, -100)
            labels[:, 2] = x[:, 2]
            masked = x.clone()
            masked[:, 2] = 0
            opt.zero_grad()
            logits = model(input_ids=masked)["logits"]
            F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=-100).backward()
            opt.step()

    assert codes(watched(masked_tokens, WATCHER)) == []

    def classify():
        enc, head = EncoderLM(causal=False), nn.Linear(V, 3)
        opt2 = torch.optim.SGD([*enc.parameters(), *head.parameters()], lr=0.1)
        for x, _ in _batches():
            opt2.zero_grad()
            F.cross_entropy(head(enc(input_ids=x)["logits"].mean(1)), x[:, 0] % 3).backward()
            opt2.step()

    assert codes(watched(classify, WATCHER)) == []
