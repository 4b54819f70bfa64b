"""Lornatang/SRGAN-PyTorch#1: the schedulers were built as `StepLR(step_size=epochs // 2,
gamma=0.1)`, an epoch-level schedule, but `scheduler.step()` ran after every training step, so the
learning rate fell tenfold every few batches, was almost zero within the first epoch, and the
model did not train; moving the call to the end of the epoch fixed it.

Here: a small convolutional upsampler trained for 8 epochs of 24 batches with the same schedule
stepped per batch. `fixed` steps the scheduler once per epoch.
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = sys.argv[1:] == ["fixed"]
torch.manual_seed(0)
EPOCHS = 8

high_res = F.avg_pool2d(torch.randn(768, 1, 16, 16), 3, stride=1, padding=1)
low_res = F.avg_pool2d(high_res, 2)
generator = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.PReLU(),
                          nn.Conv2d(16, 4, 3, padding=1), nn.PixelShuffle(2))
optimizer = torch.optim.Adam(generator.parameters(), lr=1e-3)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=EPOCHS // 2, gamma=0.1)

for _epoch in range(EPOCHS):
    for start in range(0, len(high_res), 32):
        optimizer.zero_grad()
        loss = F.mse_loss(generator(low_res[start:start + 32]), high_res[start:start + 32])
        loss.backward()
        optimizer.step()
        if not FIXED:
            scheduler.step()
    if FIXED:
        scheduler.step()

with torch.no_grad():
    mse = F.mse_loss(generator(low_res), high_res).item()
    baseline = F.mse_loss(F.interpolate(low_res, scale_factor=2), high_res).item()
print(f"final lr {optimizer.param_groups[0]['lr']:.1e}; MSE {mse:.4f} (nearest-neighbour upsampling {baseline:.4f})")
