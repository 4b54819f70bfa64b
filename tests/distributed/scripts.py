"""The training scripts the distributed tests launch with `torchpact run --nproc N`."""

CLEAN = '''
import sys
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Classifier(nn.Module):
    """A small transformer with a frozen embedding table."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        self.embed.weight.requires_grad_(False)
        self.encoder = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True)
        self.head = nn.Linear(32, 5)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)).mean(1))


class ConvNet(nn.Module):
    """A small CNN whose auxiliary branch is used on some batches only."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(2))
        self.fc = nn.Linear(32, 5)
        self.aux = nn.Linear(32, 5)

    def forward(self, x, use_aux):
        h = self.conv(x).flatten(1)
        return self.fc(h) + (self.aux(h) if use_aux else 0)


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    tokens = torch.randint(0, 50, (world * 128, 12))
    images = torch.randn(world * 128, 1, 8, 8)
    labels = torch.randint(0, 5, (world * 128,))
    data = TensorDataset(tokens, images, labels)
    sampler = DistributedSampler(data, shuffle=True, seed=1)
    loader = DataLoader(data, batch_size=8, sampler=sampler, drop_last=True)

    torch.manual_seed(rank)  # DDP broadcasts rank 0's parameters when it wraps
    text = DDP(Classifier())
    cnn = DDP(ConvNet(), find_unused_parameters=True)  # needed: the aux branch is used on some steps only
    opt_text = torch.optim.AdamW([p for p in text.parameters() if p.requires_grad], lr=1e-3)
    opt_cnn = torch.optim.SGD(cnn.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt_text, T_max=24)
    accumulate = 2
    step = 0
    for epoch in range(3):
        sampler.set_epoch(epoch)
        text.train(), cnn.train()
        for i, (tok, img, y) in enumerate(loader):
            use_aux = step % 3 == 1
            if (i + 1) % accumulate:
                with text.no_sync(), cnn.no_sync():
                    loss = F.cross_entropy(text(tok), y) + F.cross_entropy(cnn(img, use_aux), y)
                    (loss / accumulate).backward()
                continue
            loss = F.cross_entropy(text(tok), y) + F.cross_entropy(cnn(img, use_aux), y)
            (loss / accumulate).backward()
            torch.nn.utils.clip_grad_norm_(text.parameters(), 1.0)
            opt_text.step()
            opt_cnn.step()
            sched.step()
            opt_text.zero_grad()
            opt_cnn.zero_grad()
            step += 1
            if step % 4 == 0:
                logged = loss.detach().clone()
                dist.all_reduce(logged)
        text.eval(), cnn.eval()
        with torch.no_grad():
            text(tokens[:8])
            cnn.module(images[:8], False)  # evaluation through .module, without backward: fine
    if rank == 0:
        state = {**{f"text.{k}": v for k, v in text.module.state_dict().items()},
                 **{f"cnn.{k}": v for k, v in cnn.module.state_dict().items()}}
        torch.save(state, sys.argv[1])
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''

# Every scenario below carries one bug; one optimizer steps them all (as one training script has one).
# The script ends in a hang on purpose (different numbers of batches), cut by the collective timeout.
BUGGY = '''
import datetime, os, sys, time
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))  # the hang lasts 6 times the watchdog's 3 s
rank, world = dist.get_rank(), dist.get_world_size()
out_dir = sys.argv[1]
opt = None


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def batch(step):
    return torch.randn(8, 4, generator=torch.Generator().manual_seed(100 * step + rank))


def train(forward, model, steps, before=None):
    global opt
    if opt is None:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
    else:
        opt.add_param_group({"params": list(model.parameters())})
    for step in range(steps):
        if before:
            before()
        opt.zero_grad()
        forward(batch(step)).pow(2).mean().backward()  # the training forward
        opt.step()


class WithAux(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 8)
        self.aux = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.body(x))


# TP604 (info): find_unused_parameters=True, but the unused set never changes
fixed = DDP(WithAux(), find_unused_parameters=True)
train(fixed, fixed.module, 12)

# TP654: rank 1 loads its data slowly (100 ms: a quarter of the step even when a loaded machine makes
# the rest of it take 300 ms; the thresholds themselves are tested in test_straggler_decision.py)
straggler = DDP(net())
train(straggler, straggler.module, 50, before=lambda: time.sleep(0.1 if rank == 1 else 0))

# TP604: a submodule never called in forward, without find_unused_parameters
unused = DDP(WithAux())
try:
    train(unused, unused.module, 3)
except RuntimeError as exc:
    print("caught:", str(exc)[:60], flush=True)
dist.barrier()

# TP601: converted after wrapping
converted = DDP(model := net())
model.double()
train(lambda x: converted(x.double()), model, 2)  # converted

# TP602: training forward through .module
bypassed = DDP(nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2)))
train(bypassed.module, bypassed.module, 3)

# TP652: parameters changed on rank 0 only, after wrapping
loaded = DDP(model := nn.Sequential(nn.Linear(4, 5), nn.Linear(5, 2)))
if rank == 0:
    with torch.no_grad():
        model[0].weight.mul_(2)
train(loaded, model, 5)  # a check step falls in these 5 steps: the gradients are compared too

# TP605 + TP651: BatchNorm under DDP, buffers not broadcast
torch.manual_seed(0)
bn = DDP(nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)), broadcast_buffers=False)
train(lambda x: bn(x + rank), bn.module, 2)  # batchnorm

# TP501: DistributedSampler without set_epoch; TP603: every rank saves the same file
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 2))
sampler = DistributedSampler(data, shuffle=True)
loader = DataLoader(data, batch_size=8, sampler=sampler)
model = DDP(net())
opt.add_param_group({"params": list(model.parameters())})
for epoch in range(2):
    for x, y in loader:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
torch.save(model.module.state_dict(), os.path.join(out_dir, "checkpoint.pt"))

# TP653 + TP655: ranks with different numbers of batches hang at the last one
shard = DataLoader(TensorDataset(torch.randn(8 * (4 + rank), 4)), batch_size=8)
for (x,) in shard:
    opt.zero_grad()
    model(x).sum().backward()  # extra batch
    opt.step()
dist.barrier()  # rank 0 waits here
print("unreachable", flush=True)
'''
