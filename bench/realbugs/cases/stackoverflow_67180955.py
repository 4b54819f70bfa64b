"""Stack Overflow 67180955 / "A bug that plagues thousands of open-source ML projects": every DataLoader
worker applies the same random augmentation.

Original: a dataset drawing its augmentation from NumPy's global generator, which torch < 1.9 copied
unchanged into each worker. torch 2.13 re-seeds the global NumPy generator per worker, so the
adaptation keeps the bug where it still lives: a generator the dataset owns (`self.rng`), copied
into each worker in the same state. `fixed` seeds it per worker in `worker_init_fn`.
"""

import sys

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

FIXED = sys.argv[1:] == ["fixed"]
torch.manual_seed(0)


class RandomCropDataset(Dataset):
    def __init__(self, n=64):
        self.images = torch.randn(n, 3, 12, 12)
        self.rng = np.random.RandomState(0)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        top, left = self.rng.randint(0, 5, size=2)  # the "random" crop
        return self.images[i, :, top:top + 8, left:left + 8], i % 4


def seed_worker(worker_id):
    info = torch.utils.data.get_worker_info()
    info.dataset.rng = np.random.RandomState(info.seed % 2**32)


if __name__ == "__main__":
    loader = DataLoader(RandomCropDataset(), batch_size=8, num_workers=2,
                        worker_init_fn=seed_worker if FIXED else None)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
