"""A recurrent word-level language model trained with truncated back-propagation through time: the
hidden state carries over from one chunk to the next but is detached from the previous chunk's
graph, gradients are clipped with ``clip_grad_norm_``. ``--tied`` shares one weight matrix between
the embedding and the output layer; ``--update manual`` applies plain SGD by hand through
``p.data`` (no optimizer), ``--update adamw`` uses AdamW. The best model's state is saved and
loaded back for the final test.

The corpus is generated here: words drawn from a fixed random first-order Markov chain.

    python rnn_lm.py [--cell lstm|gru] [--tied] [--update manual|adamw] [--epochs 2]
"""

import argparse
import math
import os
import tempfile

import torch
import torch.nn.functional as F
from torch import nn


def markov_text(words: int, vocab: int, gen: torch.Generator) -> torch.Tensor:
    table = torch.softmax(4 * torch.randn(vocab, vocab, generator=gen), dim=1)
    ids = torch.empty(words, dtype=torch.long)
    ids[0] = 0
    for i in range(1, words):
        ids[i] = torch.multinomial(table[ids[i - 1]], 1, generator=gen)
    return ids


def columns(ids: torch.Tensor, streams: int) -> torch.Tensor:
    """(length, streams): each column a contiguous piece of the text."""
    usable = ids.numel() // streams * streams
    return ids[:usable].view(streams, -1).t().contiguous()


class RecurrentLM(nn.Module):
    def __init__(self, cell: str, vocab: int, width: int, layers: int, dropout: float, tied: bool):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        recurrent = nn.LSTM if cell == "lstm" else nn.GRU
        self.rnn = recurrent(width, width, layers, dropout=dropout)
        self.drop = nn.Dropout(dropout)
        self.project = nn.Linear(width, vocab)
        if tied:
            self.project.weight = self.embed.weight
        self.cell, self.layers, self.width = cell, layers, width

    def initial_state(self, streams: int):
        zeros = torch.zeros(self.layers, streams, self.width)
        return (zeros, zeros.clone()) if self.cell == "lstm" else zeros

    def forward(self, tokens, state):
        out, state = self.rnn(self.drop(self.embed(tokens)), state)
        return self.project(self.drop(out)), state


def cut_history(state):
    """The state's values without the graph that produced them (truncated BPTT)."""
    return tuple(s.detach() for s in state) if isinstance(state, tuple) else state.detach()


def average_loss(model, data, chunk) -> float:
    model.eval()
    total, state = 0.0, model.initial_state(data.shape[1])
    with torch.no_grad():
        for start in range(0, data.shape[0] - 1, chunk):
            inputs, targets = data[start:start + chunk], data[start + 1:start + 1 + chunk]
            inputs = inputs[:targets.shape[0]]
            logits, state = model(inputs, state)
            total += inputs.shape[0] * F.cross_entropy(logits.flatten(0, 1), targets.flatten()).item()
    return total / (data.shape[0] - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", choices=("lstm", "gru"), default="lstm")
    parser.add_argument("--tied", action="store_true")
    parser.add_argument("--update", choices=("manual", "adamw"), default="manual")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--words", type=int, default=4000)
    parser.add_argument("--vocab", type=int, default=120)
    parser.add_argument("--width", type=int, default=48)
    parser.add_argument("--chunk", type=int, default=20)
    parser.add_argument("--streams", type=int, default=10)
    parser.add_argument("--clip", type=float, default=0.5)
    args = parser.parse_args()

    gen = torch.Generator().manual_seed(17)
    torch.manual_seed(17)
    text = markov_text(args.words, args.vocab, gen)
    cut = int(0.8 * text.numel())
    train, valid = columns(text[:cut], args.streams), columns(text[cut:], 5)

    model = RecurrentLM(args.cell, args.vocab, args.width, 2, 0.2, args.tied)
    lr = 5.0 if args.update == "manual" else 2e-3
    adamw = torch.optim.AdamW(model.parameters(), lr=lr) if args.update == "adamw" else None
    best, checkpoint = math.inf, os.path.join(tempfile.mkdtemp(), "best.pt")
    for epoch in range(1, args.epochs + 1):
        model.train()
        state = model.initial_state(args.streams)
        for start in range(0, train.shape[0] - 1 - args.chunk, args.chunk):
            inputs = train[start:start + args.chunk]
            targets = train[start + 1:start + 1 + args.chunk]
            state = cut_history(state)
            model.zero_grad()
            logits, state = model(inputs, state)
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            if adamw is None:
                for p in model.parameters():
                    p.data.add_(p.grad, alpha=-lr)
            else:
                adamw.step()
        valid_loss = average_loss(model, valid, args.chunk)
        print(f"epoch {epoch}: valid loss {valid_loss:.3f}, perplexity {math.exp(valid_loss):.1f}")
        if valid_loss < best:
            best = valid_loss
            torch.save(model.state_dict(), checkpoint)
        elif adamw is None:
            lr /= 4
    model.load_state_dict(torch.load(checkpoint))
    print(f"best model: valid loss {average_loss(model, valid, args.chunk):.3f}")


if __name__ == "__main__":
    main()
