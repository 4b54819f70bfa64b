"""karpathy/nanochat#59: with gradient accumulation each micro-batch's loss was its own mean over
its valid tokens, and the gradients were scaled by `1 / grad_accum_steps` "assuming equal tokens per
batch"; when padding (the number of valid tokens) varies across micro-batches, tokens of short
micro-batches weigh far more than those of long ones and the step is not the gradient of the mean
over its tokens. The same fault was fixed in the Hugging Face Trainer by
huggingface/transformers#34191 (`num_items_in_batch`); issue 31 names the class after
huggingface/transformers#35203, a later report on that normalisation.

Here: a bigram language model trained with 4 micro-batches per optimizer step, grouped by length as
`group_by_length` does: two micro-batches of short sequences (2 targets each) and two of long ones
(59 targets each), which follow different continuation rules. The per-micro-batch mean gives the
short sequences half the weight although they are 3% of the tokens, so the model is wrong on the
long ones. `fixed` sums the token losses and divides by the valid tokens of the whole step.
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = sys.argv[1:] == ["fixed"]
torch.manual_seed(0)
VOCAB, ACCUM = 20, 4


def sequences(n, length, stride):
    ids = torch.empty(n, length, dtype=torch.long)
    ids[:, 0] = torch.randint(0, VOCAB, (n,))
    for t in range(1, length):
        ids[:, t] = (ids[:, t - 1] + stride) % VOCAB
    return ids


def micro_batches():
    for length, stride in ((3, 1), (60, 2), (3, 1), (60, 2)):
        ids = sequences(8, length, stride)
        yield ids[:, :-1], ids[:, 1:]


model = nn.Sequential(nn.Embedding(VOCAB, 32), nn.Linear(32, VOCAB))
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
for _step in range(60):
    window = list(micro_batches())
    valid_in_step = sum(labels.numel() for _, labels in window)
    optimizer.zero_grad()
    for inputs, labels in window:
        logits = model(inputs).flatten(0, 1)
        if FIXED:
            loss = F.cross_entropy(logits, labels.flatten(), reduction="sum") / valid_in_step
        else:
            loss = F.cross_entropy(logits, labels.flatten()) / ACCUM
        loss.backward()
    optimizer.step()

with torch.no_grad():
    test = [sequences(64, 3, 1), sequences(64, 60, 2)]
    token_loss = sum(F.cross_entropy(model(t[:, :-1]).flatten(0, 1), t[:, 1:].flatten(), reduction="sum")
                     for t in test) / sum(t[:, 1:].numel() for t in test)
print(f"per-token loss over all tokens {token_loss.item():.3f}")
