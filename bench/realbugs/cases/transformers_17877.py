"""huggingface/transformers#17877: `_init_weights` runs again on weights that are already set.

Original: GPT-2's initialisation ran repeatedly over the model's parameters (every `post_init()` /
`tie_weights` path), re-drawing weights that were already initialised or loaded. Here: a tiny GPT-style
model whose `tie_weights()` calls `post_init()` again; called after training started, it re-draws the
trained weights. `fixed` only ties the weights.
"""

import sys

import torch
import torch.nn as nn

FIXED = sys.argv[1:] == ["fixed"]
torch.manual_seed(0)


class TinyGPT(nn.Module):
    def __init__(self, vocab=50, dim=32, initializer_range=0.02):
        super().__init__()
        self.initializer_range = initializer_range
        self.wte = nn.Embedding(vocab, dim)
        self.block = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.post_init()

    def _init_weights(self, module):
        with torch.no_grad():
            if isinstance(module, nn.Linear):
                module.weight.normal_(mean=0.0, std=self.initializer_range)
                if module.bias is not None:
                    module.bias.data.zero_()
            elif isinstance(module, nn.Embedding):
                module.weight.normal_(mean=0.0, std=self.initializer_range)
            elif isinstance(module, nn.LayerNorm):
                module.bias.data.zero_()
                module.weight.data.fill_(1.0)

    def post_init(self):
        self.apply(self._init_weights)

    def tie_weights(self):
        self.lm_head.weight = self.wte.weight
        if not FIXED:
            self.post_init()  # the bug: the initialisation runs again over every (trained) weight

    def forward(self, ids):
        h = self.wte(ids)
        h = self.ln_f(h + self.block(h))
        return self.lm_head(h)


model = TinyGPT()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(24):
    ids = torch.randint(0, 50, (4, 16))
    optimizer.zero_grad()
    logits = model(ids[:, :-1])
    loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    if step == 12:
        model.tie_weights()  # e.g. after swapping in a new head, as from_pretrained paths do
