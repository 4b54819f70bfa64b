"""A causal Transformer language model: token and learned position embeddings, an
``nn.TransformerEncoder`` under a causal mask, an output layer tied to the token embedding, AdamW
with linear warm-up, gradient clipping and a held-out evaluation under ``torch.no_grad()``.

The text is generated here: a repeating grammar of numbered "words" with random noise, so there is
something to learn in a few dozen steps.

    python transformer_lm.py [--steps 30] [--batch 16] [--context 32]
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


def noisy_counting(length: int, vocab: int, gen: torch.Generator) -> torch.Tensor:
    """Mostly counts upwards modulo vocab, with a jump one token in ten."""
    steps = torch.ones(length, dtype=torch.long)
    jumps = torch.rand(length, generator=gen) < 0.1
    steps[jumps] = torch.randint(0, vocab, (int(jumps.sum()),), generator=gen)
    return steps.cumsum(0) % vocab


class CausalLM(nn.Module):
    def __init__(self, vocab: int, context: int, width: int = 64, heads: int = 4, depth: int = 2):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Parameter(torch.zeros(context, width))
        block = nn.TransformerEncoderLayer(width, heads, dim_feedforward=4 * width, dropout=0.1,
                                           batch_first=True, norm_first=True)
        self.stack = nn.TransformerEncoder(block, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tokens.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        length = ids.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(length)
        h = self.tokens(ids) + self.positions[:length]
        return self.head(self.norm(self.stack(h, mask=mask, is_causal=True)))


def windows(text: torch.Tensor, count: int, context: int, gen: torch.Generator) -> torch.Tensor:
    starts = torch.randint(0, text.numel() - context - 1, (count,), generator=gen)
    return torch.stack([text[s:s + context + 1] for s in starts.tolist()])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--context", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=50)
    args = parser.parse_args()

    gen = torch.Generator().manual_seed(21)
    torch.manual_seed(21)
    text = noisy_counting(20_000, args.vocab, gen)
    train_text, held_text = text[:16_000], text[16_000:]

    model = CausalLM(args.vocab, args.context)
    adamw = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    warmup = torch.optim.lr_scheduler.LambdaLR(adamw, lambda step: min(1.0, (step + 1) / 10))
    for step in range(1, args.steps + 1):
        model.train()
        batch = windows(train_text, args.batch, args.context, gen)
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), batch[:, 1:].reshape(-1))
        adamw.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        adamw.step()
        warmup.step()
        if step % 15 == 0:
            model.eval()
            with torch.no_grad():
                held = windows(held_text, 64, args.context, gen)
                held_loss = F.cross_entropy(model(held[:, :-1]).reshape(-1, args.vocab), held[:, 1:].reshape(-1))
            print(f"step {step}: train loss {loss.item():.3f}, held-out loss {held_loss.item():.3f}")


if __name__ == "__main__":
    main()
