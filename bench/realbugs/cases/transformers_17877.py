"""huggingface/transformers#17877: a model's weight initialisation runs again over weights that are
already set (GPT-2's initialisation was re-applied through the paths that tie the embeddings),
re-drawing weights that were already initialised, loaded or trained.

Here: a tiny language model of our own whose `share_embeddings()` also calls the model's
initialisation; called after training started (as happens when a head is swapped and re-tied), it
wipes the trained weights. `fixed` only ties the weights.
"""

import sys

import torch
from torch import nn

FIXED = sys.argv[1:] == ["fixed"]
torch.manual_seed(0)


class TinyLM(nn.Module):
    def __init__(self, vocab=50, width=32, init_std=0.02):
        super().__init__()
        self.init_std = init_std
        self.embed = nn.Embedding(vocab, width)
        self.mlp = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width))
        self.norm = nn.LayerNorm(width)
        self.unembed = nn.Linear(width, vocab, bias=False)
        self.initialise()

    def initialise(self):
        """Draws every weight afresh: truncated normal matrices, zero biases, unit norms."""
        with torch.no_grad():
            for layer in self.modules():
                if isinstance(layer, (nn.Linear, nn.Embedding)):
                    nn.init.trunc_normal_(layer.weight, std=self.init_std, a=-2 * self.init_std, b=2 * self.init_std)
                if isinstance(layer, (nn.Linear, nn.LayerNorm)) and layer.bias is not None:
                    nn.init.zeros_(layer.bias)
                if isinstance(layer, nn.LayerNorm):
                    nn.init.ones_(layer.weight)

    def share_embeddings(self):
        self.unembed.weight = self.embed.weight
        if not FIXED:
            self.initialise()  # the bug: every (trained) weight is drawn again

    def forward(self, ids):
        h = self.embed(ids)
        return self.unembed(self.norm(h + self.mlp(h)))


model = TinyLM()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(24):
    ids = torch.randint(0, 50, (4, 16))
    optimizer.zero_grad()
    logits = model(ids[:, :-1])
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    if step == 12:
        model.share_embeddings()
