"""ifzhang/FairMOT#223 (also #125, #99): the re-ID classifier `nn.Linear(emb_dim, nID)` lived in the
loss module, `MotLoss`, while the optimizer was built from `model.parameters()`; the classifier got
gradients at every step but stayed at its random initialisation. The author then added the loss's
parameters to the optimizer, which improved re-ID.

Here: an embedding network trained through a loss module that owns the identity classifier, with
the optimizer built from the model's parameters only. `fixed` adds the loss module's parameters.
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = sys.argv[1:] == ["fixed"]
torch.manual_seed(0)
N_ID, EMB_DIM = 64, 16


class ReIDLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.classifier = nn.Linear(EMB_DIM, N_ID)

    def forward(self, embedding, ids):
        return F.cross_entropy(self.classifier(F.normalize(embedding, dim=1) * 8), ids)


centres = torch.randn(N_ID, 32)
identity = torch.randint(0, N_ID, (2048,))
crops = centres[identity] + 0.8 * torch.randn(2048, 32)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, EMB_DIM))
criterion = ReIDLoss()
params = list(model.parameters()) + (list(criterion.parameters()) if FIXED else [])
optimizer = torch.optim.Adam(params, lr=2e-3)
for _epoch in range(6):
    for start in range(0, 2048, 64):
        optimizer.zero_grad()
        loss = criterion(model(crops[start:start + 64]), identity[start:start + 64])
        loss.backward()
        optimizer.step()

with torch.no_grad():
    embedding = F.normalize(model(crops), dim=1)
    nearest = (embedding @ embedding.T).fill_diagonal_(-2).argmax(1)
    rank1 = (identity[nearest] == identity).float().mean().item()
print(f"identity loss {loss.item():.3f}; rank-1 re-identification by nearest embedding {rank1:.2f}")
