"""Runtime TP360: a (batch, seq, feature) tensor fed to a sequence module that reads (seq, batch, feature).

Variants written before the watcher was tuned: LSTM, GRU (positional layers) and RNN built without
`batch_first`, nn.MultiheadAttention and a TransformerEncoderLayer without it; the loss
as a module (CrossEntropyLoss, BCEWithLogitsLoss) or a function (F.mse_loss, F.cross_entropy with keyword
arguments); inside a helper model. Clean twins: `batch_first=True`, a time-major feed
(`x.transpose(0, 1)`), a PackedSequence, seq == batch, a time-major language model with flattened and 2-D
targets, and batch size 1.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence

from tests.watch.util import codes, watched

WATCHER = ["rnn_layout"]
B, T, FEAT, CLASSES = 12, 7, 5, 3


def _data(b=B, t=T):
    g = torch.Generator().manual_seed(0)
    return torch.randn(b, t, FEAT, generator=g), torch.randint(0, CLASSES, (b,), generator=g)


def _fit(model, loss_of, steps=3, b=B, t=T):
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = _data(b, t)
    for _ in range(steps):
        opt.zero_grad()
        loss_of(model, x, y).backward()
        opt.step()


def _tp360(findings):
    return [f for f in findings if f.code == "TP360"]


class LastStep(nn.Module):
    """A classifier over the last time step, written for (batch, seq, feature) input."""

    def __init__(self, rnn, hidden=16, time_major=False):
        super().__init__()
        self.rnn, self.head, self.time_major = rnn, nn.Linear(hidden, CLASSES), time_major

    def forward(self, x):
        if self.time_major:
            out, _ = self.rnn(x.transpose(0, 1))
            return self.head(out[-1])
        out, _ = self.rnn(x)
        return self.head(out[:, -1, :])


def test_the_bug_is_real_on_this_torch():
    """Without batch_first the LSTM carries state across the samples: sample 0's output depends on sample 1."""
    torch.manual_seed(0)
    lstm = nn.LSTM(FEAT, 8)
    x, _ = _data()
    changed = x.clone()
    changed[0] += 1.0
    out, out2 = lstm(x)[0], lstm(changed)[0]
    assert not torch.allclose(out[1], out2[1])  # sample 1's outputs changed when only sample 0 did


def test_lstm_classifier_with_a_loss_module_is_a_warning():
    criterion = nn.CrossEntropyLoss()
    model = LastStep(nn.LSTM(FEAT, 16))
    [f] = _tp360(watched(lambda: _fit(model, lambda m, x, y: criterion(m(x), y)), WATCHER))
    assert f.severity.value == "warning" and f.subject == "rnn"
    assert f"[{B}, {T}, {FEAT}]" in f.message and "batch_first=True" in f.fix


def test_gru_with_layers_positional_against_a_2d_binary_target():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.gru = nn.GRU(FEAT, 16, 2)
            self.out = nn.Linear(16, 1)

        def forward(self, x):
            seq_out, _ = self.gru(x)
            return self.out(seq_out[:, -1])

    crit = nn.BCEWithLogitsLoss()
    model = Net()
    [f] = _tp360(watched(lambda: _fit(model, lambda m, x, y: crit(m(x), (y[:, None] > 0).float())), WATCHER))
    assert f.subject == "gru"


def test_plain_rnn_regression_with_functional_mse_in_a_helper():
    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = nn.RNN(FEAT, 16, nonlinearity="relu")

        def forward(self, x):
            return self.cell(x)[0].mean(1)  # pools over dim 1, believing it is time

    class Regressor(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc, self.fc = Encoder(), nn.Linear(16, 1)

        def forward(self, x):
            return self.fc(self.enc(x))

    model = Regressor()
    [f] = _tp360(watched(lambda: _fit(model, lambda m, x, y: F.mse_loss(m(x), y[:, None].float())), WATCHER))
    assert f.subject == "enc.cell" and "RNN" in f.message


def test_multihead_attention_and_a_transformer_layer_without_batch_first():
    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(FEAT, 8)
            self.attn = nn.MultiheadAttention(8, 2)
            self.head = nn.Linear(8, CLASSES)

        def forward(self, x):
            h = self.proj(x)
            h, _ = self.attn(h, h, h)
            return self.head(h.mean(1))

    model = Attn()
    [f] = _tp360(watched(lambda: _fit(model, lambda m, x, y: F.cross_entropy(input=m(x), target=y)), WATCHER))
    assert f.subject == "attn" and "MultiheadAttention" in f.message

    enc = nn.Sequential(nn.Linear(FEAT, 8), nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0))
    head = nn.Linear(8, CLASSES)
    found = _tp360(watched(lambda: _fit(nn.ModuleList([enc, head]),
                                        lambda m, x, y: F.cross_entropy(m[1](m[0](x).mean(1)), y)), WATCHER))
    assert [f.subject for f in found] == ["1.self_attn"]  # named within the model called: `enc`


def test_clean_twins_are_silent():
    ce = nn.CrossEntropyLoss()
    loss = lambda m, x, y: ce(m(x), y)  # noqa: E731

    assert codes(watched(lambda: _fit(LastStep(nn.LSTM(FEAT, 16, batch_first=True)), loss), WATCHER)) == []
    assert codes(watched(lambda: _fit(LastStep(nn.GRU(FEAT, 16), time_major=True), loss), WATCHER)) == []
    # seq == batch: the shapes cannot tell
    assert codes(watched(lambda: _fit(LastStep(nn.LSTM(FEAT, 16)), loss, b=T, t=T), WATCHER)) == []

    class Packed(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn, self.head = nn.LSTM(FEAT, 16), nn.Linear(16, CLASSES)

        def forward(self, x):
            lengths = torch.full((x.size(0),), x.size(1))
            _, (h, _) = self.rnn(pack_padded_sequence(x, lengths, batch_first=True))
            return self.head(h[-1])

    assert codes(watched(lambda: _fit(Packed(), loss), WATCHER)) == []

    attn = nn.MultiheadAttention(FEAT, 1, batch_first=True)
    head = nn.Linear(FEAT, CLASSES)
    assert codes(watched(lambda: _fit(nn.ModuleList([attn, head]),
                                      lambda m, x, y: ce(m[1](m[0](x, x, x)[0].mean(1)), y)), WATCHER)) == []


def test_time_major_language_model_and_batch_of_one_are_silent():
    vocab, seq, batch = 11, 9, 4

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.rnn, self.dec = nn.Embedding(vocab, 8), nn.LSTM(8, 8), nn.Linear(8, vocab)

        def forward(self, tokens):  # (seq, batch), as pytorch/examples' word_language_model
            return self.dec(self.rnn(self.emb(tokens))[0])

    def run(batch_size, flat):
        model = LM()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        data = torch.randint(0, vocab, (seq + 1, batch_size))
        for _ in range(3):
            opt.zero_grad()
            logits = model(data[:-1])
            if flat:
                F.cross_entropy(logits.view(-1, vocab), data[1:].reshape(-1)).backward()
            else:  # (seq, batch) targets against (seq, vocab, batch) scores
                F.cross_entropy(logits.permute(0, 2, 1), data[1:]).backward()
            opt.step()

    assert codes(watched(lambda: run(batch, True), WATCHER)) == []
    assert codes(watched(lambda: run(batch, False), WATCHER)) == []
    assert codes(watched(lambda: run(1, True), WATCHER)) == []


def test_a_failing_loss_listener_switches_the_watcher_off_and_training_goes_on():
    from torchpact.watch.watchers.rnn_layout import RnnLayout

    def boom(call):
        raise RuntimeError("listener bug")

    watcher = RnnLayout()
    watcher._loss_call = boom  # type: ignore[method-assign]
    model = LastStep(nn.LSTM(FEAT, 16))
    findings = watched(lambda: _fit(model, lambda m, x, y: F.cross_entropy(m(x), y)), [watcher])
    [f] = findings
    assert f.code == "TP002" and "rnn_layout" in f.message and "listener bug" in f.message
