"""Fine-tunes a model in pure fp16 from a checkpoint (run on a GPU)."""

import torch
import torch.nn as nn
from torch import optim


def finetune(path: str, steps: int = 100):
    model = nn.Sequential(nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 2))
    model.load_state_dict(torch.load(path, weights_only=False))
    model = model.half().cuda()
    optimizer = optim.AdamW(model.parameters(), lr=2e-5)
    criterion = nn.BCELoss()
    for step in range(steps):
        x = torch.randn(64, 512, device="cuda", dtype=torch.float16)
        y = torch.randint(0, 2, (64, 2), device="cuda").half()
        optimizer.zero_grad()
        loss = criterion(torch.sigmoid(model(x)), y)
        loss.backward()
        optimizer.step()
        torch.cuda.empty_cache()
        print(step, loss.item())
    scores = model(torch.randn(1, 512, device="cuda", dtype=torch.float16))
    return torch.log(torch.softmax(scores, dim=-1)).numpy()
