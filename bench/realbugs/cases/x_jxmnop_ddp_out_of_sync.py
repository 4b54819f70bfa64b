"""x.com/jxmnop (2024-04-11): a Hugging Face Trainer run whose model is sometimes an nn.Module and
sometimes wrapped in DistributedDataParallel, so gradients are only sometimes all-reduced and the
replicas drift apart.

Original: a `BuggyTrainer.training_step` that calls `get_model_ddp_or_not(step)` — the bare model on
even steps, a new `DDP(model)` on odd ones — with a contrastive loss. Here: the same training step
without the Trainer, a small encoder and random token batches. Run with `torchpact run --nproc 2`.
`fixed` wraps the model once.
"""

import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

FIXED = sys.argv[1:] == ["fixed"]
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Embedding(100, 32), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 32))
wrapped = DDP(model)


def get_model_ddp_or_not(step):
    if FIXED:
        return wrapped
    return model if step % 2 == 0 else DDP(model)  # sometimes nn.Module, sometimes DDP


def compute_contrastive_loss(model, input_ids):
    embeddings = model(input_ids).mean(dim=1)
    batch_size = embeddings.size(0)
    labels = torch.cat([torch.arange(batch_size // 2), torch.arange(batch_size // 2)])
    return nn.functional.cross_entropy(embeddings @ embeddings.T, labels)


optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
gen = torch.Generator().manual_seed(100 + rank)
for step in range(10):
    input_ids = torch.randint(0, 100, (8, 12), generator=gen)
    loss = compute_contrastive_loss(get_model_ddp_or_not(step), input_ids)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
dist.destroy_process_group()
