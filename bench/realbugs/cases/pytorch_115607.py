"""pytorch#115607: after an iteration whose gradients are None, the dynamo-compiled training loop
stops updating the parameters, while eager keeps training.

The codegen bug is fixed in torch 2.13, so its effect is simulated here: the "compiled" step computes
Adam's update, then its write-back into the parameters is lost (the optimizer state still advances),
from the first step that saw no gradients on. The training loop has the issue's shape:
`zero_grad()` every iteration, no backward at iteration 1. `fixed` runs the eager step.
"""

import sys

import torch

FIXED = sys.argv[1:] == ["fixed"]
torch.manual_seed(0)


class CompiledAdam(torch.optim.Adam):
    """Adam as the buggy compiled graph ran it: updates lost once a step saw no gradients."""

    lost_write_back = False

    @torch.no_grad()
    def step(self, closure=None):
        params = [p for g in self.param_groups for p in g["params"]]
        if all(p.grad is None for p in params):
            self.lost_write_back = not FIXED  # the graph is re-specialised for grads that are None
        before = [p.clone() for p in params]
        loss = super().step(closure)
        if self.lost_write_back:
            for p, b in zip(params, before, strict=True):
                p.copy_(b)  # the functional copy's result never reaches the parameter
        return loss


model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
optimizer = CompiledAdam(model.parameters(), lr=1e-2)
for i in range(30):
    x = torch.randn(8, 4)
    optimizer.zero_grad()
    if i != 1:
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        loss.backward()
    optimizer.step()
